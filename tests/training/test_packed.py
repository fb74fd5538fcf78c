"""Packed replicas: K=2 trained as one end where the two runs done one by one end.

float64, dropout off: same weights, BatchNorm statistics and metrics after a few steps of AdamW
with per-replica gradient clipping, each replica on its own batches. Gradients agree to 1e-13
(float rounding; the stacked matmuls add in another order); Adam turns the rounding of
gradients that are nearly zero into steps of ``lr * noise / eps``, hence 1e-6 on the weights.
A wrong batch, clip or statistic moves them by 1e-3 and more.
"""

import copy

import pytest
import torch
from grid.test_store import mixed_graphs
from nn.test_backends import model_pair
from torch.utils._python_dispatch import TorchDispatchMode

from graphormer_sepnorm.grid import GridGraphs
from graphormer_sepnorm.training.packed import (
    PackedReplicas,
    clip_grad_norm_per_replica,
    exempt_untrained,
)

STEPS = 4
CLIP = 0.05  # small, so that clipping acts on most steps


def train_single(model, store, batches, length):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    model.train()
    for index in batches:
        batch = store.batch(index, length)
        loss = torch.nn.functional.mse_loss(model(batch), batch.y.expand(-1, 2).double())
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()
    return model


def train_packed(packed, store, batches, length):
    """As the packed module trains: one fused AdamW on ``flat``, each replica clipped alone."""
    optimizer = torch.optim.AdamW([packed.flat], lr=1e-2, weight_decay=0.01, fused=True)
    exempt_untrained(optimizer, packed)
    packed.train()
    for index in batches:
        batch = store.batch(index, length)
        out = packed(batch)
        loss = sum(torch.nn.functional.mse_loss(o, y.expand(-1, 2).double())
                   for o, y in zip(out, batch.y, strict=True))
        optimizer.zero_grad()
        loss.backward()
        clip_grad_norm_per_replica([packed.flat], CLIP)
        optimizer.step()
    return packed


@pytest.mark.parametrize("options", [dict(), dict(sepnorm=False)])
def test_two_packed_replicas_train_as_two_single_runs(options) -> None:
    graphs = mixed_graphs()
    store = GridGraphs(graphs, multi_hop_max_dist=5)
    first, _ = model_pair(torch.float64, multi_hop_max_dist=5, **options)
    second, _ = model_pair(torch.float64, multi_hop_max_dist=5, **options)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # another start, as another seed's (away from symmetric points,
        for parameter in second.parameters():  # where Adam would amplify rounding noise)
            parameter.add_(0.1 * torch.randn(parameter.shape, generator=gen, dtype=parameter.dtype))
    gen = torch.Generator().manual_seed(0)
    # [steps, R=2, B=4]: each replica its own batches
    batches = torch.stack([torch.stack([torch.randperm(len(graphs), generator=gen)[:4]
                                        for _ in range(2)]) for _ in range(STEPS)])
    packed = train_packed(PackedReplicas([first, second]), store, batches, 32)
    singles = [train_single(copy.deepcopy(m), store, batches[:, r], 32)
               for r, m in enumerate([first, second])]
    everything = store.batch(torch.arange(len(graphs)), 32)
    for r, single in enumerate(singles):
        replica = packed.replica(r)
        expected = single.state_dict()
        got = replica.state_dict()
        assert expected.keys() == got.keys()
        for name, value in expected.items():
            torch.testing.assert_close(got[name], value, rtol=1e-6, atol=1e-6,
                                       msg=lambda text, name=name: f"{name}: {text}")
        # and the metric: eval-mode MAE over all graphs
        single.eval()
        mae = (single(everything) - everything.y).abs().mean()
        torch.testing.assert_close((replica.eval()(everything) - everything.y).abs().mean(),
                                   mae, rtol=1e-6, atol=1e-6)
    moved = (packed.replica(0).state_dict()["head.weight"] - first.state_dict()["head.weight"])
    assert moved.abs().max() > 1e-3  # it trained


def test_clip_per_replica_matches_clip_grad_norm() -> None:
    gen = torch.Generator().manual_seed(1)
    stacked = [torch.randn(3, 4, 5, generator=gen, dtype=torch.float64, requires_grad=True),
               torch.randn(3, 7, generator=gen, dtype=torch.float64, requires_grad=True)]
    for p in stacked:
        p.grad = torch.randn(p.shape, generator=gen, dtype=torch.float64)
        p.grad[1] *= 1e-3  # replica 1 stays below the threshold
    singles = [[p[r].detach().clone().requires_grad_() for p in stacked] for r in range(3)]
    for r, params in enumerate(singles):
        for p, s in zip(stacked, params, strict=True):
            s.grad = p.grad[r].clone()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
    norms = clip_grad_norm_per_replica(stacked, 1.0)
    assert norms[1] < 1.0 < norms[0]
    for r, params in enumerate(singles):
        for p, s in zip(stacked, params, strict=True):
            torch.testing.assert_close(p.grad[r], s.grad)


def test_packing_needs_one_config() -> None:
    first, _ = model_pair(torch.float64)
    other, _ = model_pair(torch.float64, sepnorm=False)
    with pytest.raises(ValueError, match="one config"):
        PackedReplicas([first, other])


@pytest.mark.parametrize("options", [dict(), dict(edge_encoding="simple"), dict(sepnorm=False)])
def test_packed_step_needs_no_per_replica_loop(options) -> None:
    """Every op of a packed training step has a vmap batching rule (no fallback loop)."""
    store = GridGraphs(mixed_graphs(), multi_hop_max_dist=5)
    model, _ = model_pair(torch.float64, multi_hop_max_dist=5, dropout=0.1,
                          attention_dropout=0.1, activation_dropout=0.1, **options)
    packed = PackedReplicas([model, model])
    torch._C._functorch._set_vmap_fallback_enabled(False)  # a fallback raises instead of looping
    try:
        out = packed.train()(store.batch(torch.arange(10).view(2, 5), 32))
        out.sum().backward()
        evaluated = packed.eval()(store.batch(torch.arange(10), 32))
    finally:
        torch._C._functorch._set_vmap_fallback_enabled(True)
    assert out.shape == (2, 5, 2) and evaluated.shape == (2, 10, 2)
    grads = dict(zip(packed.names, packed.flat.grad.split(packed.sizes, 1), strict=True))
    assert grads["atom_encoder.weight"].abs().sum() > 0  # through the gathered sums


class _MatmulShapes(TorchDispatchMode):
    """Records the batch size and the last two dims of each ``bmm``'s operands and result."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[int, tuple[int, ...], tuple[int, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.bmm.default:
            self.seen.append((args[0].shape[0], tuple(args[1].shape[-2:]),
                              tuple(out.shape[-2:])))
        return out


def test_packed_linear_layers_are_one_product_per_replica() -> None:
    """Each linear layer is one ``[R, T, D_in] @ [R, D_in, D_out]`` product, each way.

    Not one per molecule (``R * B``), as vmap's matmul made it for a ``[B, L, D]`` input whose
    replica dimension was not the leading one: a copy of the weight per molecule forward, a
    weight gradient per molecule backward.
    """
    store = GridGraphs(mixed_graphs(), multi_hop_max_dist=5)
    model, _ = model_pair(torch.float64, multi_hop_max_dist=5)  # hidden 16, ffn 24
    packed = PackedReplicas([model, model]).train()
    widths = {16, 24, 48}
    with _MatmulShapes() as shapes:
        packed(store.batch(torch.arange(10).view(2, 5), 32)).sum().backward()
    weight_shaped = [(batch, right, out) for batch, right, out in shapes.seen
                     if set(right) <= widths or set(out) <= widths]
    assert len(weight_shaped) >= 3 * 4 * 3  # 3 layers x 4 linears x (forward + 2 backward)
    assert {batch for batch, _, _ in weight_shaped} == {2}, weight_shaped


def test_packed_state_dict_has_one_stacked_entry_per_parameter() -> None:
    first, _ = model_pair(torch.float64)
    second, _ = model_pair(torch.float64)
    with torch.no_grad():
        for parameter in second.parameters():
            parameter.add_(1.0)
    packed = PackedReplicas([first, second])
    state = packed.state_dict()
    names = {n.replace(".", "__") for n in first.state_dict()}
    assert set(state) == names  # per-name keys, as before the flat parameter
    torch.testing.assert_close(state["head__weight"][1], second.head.weight)
    other = PackedReplicas([second, first])
    other.load_state_dict(state)
    torch.testing.assert_close(other.flat, packed.flat)
    assert torch.equal(other.replica(1).head.weight, second.head.weight)
    with pytest.raises(RuntimeError, match="Unexpected key"):
        other.load_state_dict({**state, "extra": torch.zeros(1)})


def test_parameters_forward_never_reads_are_exempt_from_weight_decay() -> None:
    model, _ = model_pair(torch.float64)  # 3 layers, SepNorm
    packed = PackedReplicas([model])
    untrained = {name for name, mask in zip(packed.names, packed.trained.split(packed.sizes),
                                            strict=True) if not mask.any()}
    assert all(m.all() or not m.any() for m in packed.trained.split(packed.sizes))  # per tensor
    assert untrained == {"layers.2.ffn_norm.tok_norm.weight", "layers.2.ffn_norm.tok_norm.bias",
                         "final_norm.tok_norm.weight", "final_norm.tok_norm.bias"}


def test_weight_decay_leaves_the_untrained_elements_alone() -> None:
    """With exempt_untrained, AdamW steps the trained elements as without it and leaves the
    untrained ones (zero gradient) where they were; without it they decay."""
    model, _ = model_pair(torch.float64)
    packed = PackedReplicas([model, copy.deepcopy(model)])
    start = packed.flat.detach().clone()
    trained = packed.trained.bool()
    plain = torch.nn.Parameter(start.clone())
    exempt = torch.optim.AdamW([packed.flat], lr=0.1, weight_decay=0.5, fused=True)
    exempt_untrained(exempt, packed)
    reference = torch.optim.AdamW([plain], lr=0.1, weight_decay=0.5, fused=True)
    gen = torch.Generator().manual_seed(2)
    for _ in range(3):
        grad = torch.randn(start.shape, generator=gen, dtype=torch.float64) * packed.trained

        def closure(grad=grad):  # as Lightning steps: the gradient comes inside the step
            packed.flat.grad = grad.clone()

        exempt.step(closure)
        plain.grad = grad.clone()
        reference.step()
    assert torch.equal(packed.flat[:, ~trained], start[:, ~trained])
    assert torch.equal(packed.flat[:, trained], plain[:, trained])
    assert (plain - start)[:, ~trained].ne(0).all()  # decay moves every one of them
