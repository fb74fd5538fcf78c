"""The contract between the reference model and the CPU backend.

Same parameters, same function: in float64 the forward outputs, every parameter's gradient and
the train-mode BatchNorm statistics agree to 1e-10 on batches with disconnected graphs, single
atoms and mixed sizes, for both edge encodings and both norms; in float32 (the fused C kernels)
to float rounding. Dropout draws differ between them, so dropout is compared through its
statistics (the CPU masks' keep rate and scale: ``cpu/test_dropout.py``).
"""

import copy

import pytest
import torch
from graphs import ATOM_DIMS, BOND_DIMS, random_graph
from torch_geometric.data import Data

from graphormer_sepnorm.data import GraphormerCollator
from graphormer_sepnorm.nn import Graphormer, GraphormerConfig, set_backend
from graphormer_sepnorm.nn.cpu import encoder
from graphormer_sepnorm.nn.cpu.native import fused_attention

NO_DROPOUT = dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)


def model_pair(dtype: torch.dtype, **kwargs) -> tuple[Graphormer, Graphormer]:
    """A reference model and a CPU-backend copy of it with identical parameters."""
    torch.manual_seed(0)
    values = dict(num_layers=3, hidden_dim=16, ffn_dim=24, num_heads=4,
                  multi_hop_max_dist=3) | NO_DROPOUT | kwargs
    config = GraphormerConfig(tuple(ATOM_DIMS), tuple(BOND_DIMS), num_tasks=2, **values)
    reference = Graphormer(config).to(dtype)
    for parameter in reference.parameters():  # away from the initialization's symmetries
        parameter.data.add_(torch.randn_like(parameter) * 0.1)
    return reference, set_backend(copy.deepcopy(reference), "cpu")


def single_atom() -> Data:
    return Data(x=torch.tensor([[1, 2]]), edge_index=torch.zeros(2, 0, dtype=torch.long),
                edge_attr=torch.zeros(0, 2, dtype=torch.long), num_nodes=1)


def mixed_batch():
    """Sizes 1 to 30 (several size groups), two disconnected graphs, a lone atom."""
    graphs = [random_graph(n, s, p=0.3) for s, n in enumerate([3, 30, 5, 22, 8, 4, 12])]
    graphs += [random_graph(9, seed=40, p=0.05), random_graph(14, seed=41, p=0.08),
               single_atom()]
    return GraphormerCollator(multi_hop_max_dist=5)(graphs)


def run(model: Graphormer, batch, train: bool, graph_token_only: bool):
    """Outputs, gradients and running statistics after one forward and backward."""
    model.train(train).zero_grad()
    tokens = model.encode(batch, graph_token_only=graph_token_only)[0]
    real = torch.cat([torch.ones(len(batch.node_mask), 1, dtype=torch.bool),
                      batch.node_mask], 1)[:, : tokens.shape[1]]
    out = model.head(tokens[:, 0])
    (out.pow(2).sum() + tokens[real].sin().sum()).backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    stats = {n: b.clone() for n, b in model.named_buffers() if "running" in n}
    return out, tokens[real], grads, stats


def assert_same(first, second, tolerance: float) -> None:
    (out, tokens, grads, stats), (out2, tokens2, grads2, stats2) = first, second
    close = dict(atol=tolerance, rtol=tolerance)
    torch.testing.assert_close(out, out2, **close)
    torch.testing.assert_close(tokens, tokens2, **close)
    assert grads.keys() == grads2.keys()
    for name, grad in grads.items():
        if grad is None:
            assert grads2[name] is None or not grads2[name].any(), name
        else:
            torch.testing.assert_close(grad, grads2[name], **close, msg=name)
    assert stats.keys() == stats2.keys()
    for name, value in stats.items():
        torch.testing.assert_close(value, stats2[name], **close, msg=name)


@pytest.mark.parametrize("graph_token_only", [False, True])
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("edge_encoding", ["multi_hop", "simple"])
@pytest.mark.parametrize("sepnorm", [True, False])
def test_float64_cpu_backend_equals_reference(sepnorm, edge_encoding, train, graph_token_only,
                                              one_thread):
    reference, cpu = model_pair(torch.float64, sepnorm=sepnorm, edge_encoding=edge_encoding)
    batch = mixed_batch()
    calls = []
    with pytest.MonkeyPatch.context() as patch:
        original = encoder.encode
        patch.setattr(encoder, "encode", lambda *a: calls.append(1) or original(*a))
        patch.setattr("graphormer_sepnorm.nn.cpu.encode", encoder.encode)
        got = run(cpu, batch, train, graph_token_only)
    assert calls, "the CPU backend did not run"
    assert_same(run(reference, batch, train, graph_token_only), got, 1e-10)


@pytest.mark.parametrize("sepnorm", [True, False])
def test_float32_fused_kernels_equal_reference(sepnorm, one_thread):
    if not fused_attention.usable(torch.zeros(1, 1, 16), 4):
        pytest.skip("the fused C attention kernel is not available here")
    reference, cpu = model_pair(torch.float32, sepnorm=sepnorm)
    batch = mixed_batch()
    for train in (True, False):
        assert_same(run(reference, batch, train, False), run(cpu, batch, train, False), 2e-4)


def test_checkpoints_move_between_backends():
    reference, cpu = model_pair(torch.float32)
    assert reference.state_dict().keys() == cpu.state_dict().keys()
    moved = set_backend(Graphormer(reference.config), "cpu")
    moved.load_state_dict(reference.state_dict())
    batch = mixed_batch()
    with torch.no_grad():
        torch.testing.assert_close(moved.eval()(batch), reference.eval()(batch),
                                   atol=2e-5, rtol=2e-4)


def test_model_dropout_statistics_agree_between_backends():
    # With dropout on, the two backends draw different masks but the same distribution: the
    # spread of the graph-token embeddings over repeated training passes matches.
    reference, cpu = model_pair(torch.float32, dropout=0.3, attention_dropout=0.3,
                                activation_dropout=0.3)
    batch = mixed_batch()
    spreads = []
    for model in (reference, cpu):
        model.train()
        with torch.no_grad():
            draws = torch.stack([model.embed(batch) for _ in range(60)])
        spreads.append(draws.std(0).mean())
        assert not torch.equal(draws[0], draws[1])
    assert abs(spreads[0] / spreads[1] - 1) < 0.1, spreads


def test_reference_survives_bf16_autocast():
    """The GPU's mixed precision, on the CPU: float bias, -inf padding, float32 BatchNorm."""
    reference, _ = model_pair(torch.float32)
    batch = mixed_batch()
    reference.train()
    with torch.no_grad():
        full = reference(batch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = reference(batch)
    out.float().sum().backward()
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), full, atol=0.1, rtol=0.1)
    assert all(torch.isfinite(p.grad).all() for p in reference.parameters() if p.grad is not None)
    norms = [m for m in reference.modules() if isinstance(m, torch.nn.BatchNorm1d)]
    assert norms and all(m.running_var.dtype == torch.float32 for m in norms)


def test_cpu_backend_refuses_what_it_cannot_run():
    _, cpu = model_pair(torch.float32, tok_norm="batch")
    with pytest.raises(ValueError, match="per-token atom norms"):
        cpu(mixed_batch())
    auto = set_backend(cpu, "auto")
    assert auto(mixed_batch()).shape == (10, 2)  # auto falls back to the reference
    with pytest.raises(ValueError, match="unknown backend"):
        set_backend(cpu, "gpu")
