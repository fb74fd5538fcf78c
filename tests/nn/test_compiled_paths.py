"""What the model runs on a GPU, traced by torch.compile or under vmap, on the CPU.

Traced (``backend="aot_eager"``: dynamo and autograd's tracing, no code generation), the atom
and edge embeddings are gathered sums instead of ``embedding_bag`` and dropout draws its mask
with ``rand_like``; the CUDA wing's attention runs SDPA on heads zero-padded to a multiple of 8
(here SDPA's math on the CPU, or a stand-in for the efficient kernel, the same padding). In
float64 without dropout the outputs, every gradient and the BatchNorm statistics are those of
the eager reference to 1e-12 (1e-10 with the padding).
"""

import copy

import pytest
import torch
import torch.nn.functional as F
from grid.test_store import mixed_graphs
from nn.test_backends import assert_same, model_pair, run
from torch.nn.attention import SDPBackend, sdpa_kernel

import graphormer_sepnorm.nn.cuda as cuda_attention
from graphormer_sepnorm.grid import GridBatch, GridGraphs
from graphormer_sepnorm.nn import BiasedMultiheadAttention, Graphormer, set_backend
from graphormer_sepnorm.nn.cuda import padded_attention
from graphormer_sepnorm.nn.dropout import dropout
from graphormer_sepnorm.nn.node_encoders import FeatureEmbedding
from graphormer_sepnorm.training.packed import PackedReplicas


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_gathered_feature_sums_equal_embedding_bag(mode) -> None:
    embed = FeatureEmbedding([5, 3, 7], dim=4, mode=mode).double()
    features = torch.tensor([[4, 0, 6], [1, 2, 0], [0, 0, 0]])
    expected = embed(features)
    (expected ** 2).sum().backward()
    bag_grad = embed.weight.grad.clone()
    embed.weight.grad = None
    embed.gather_sums = True
    got = embed(features)
    (got ** 2).sum().backward()
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(embed.weight.grad, bag_grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("train", "options"), [(True, dict()), (True, dict(sepnorm=False)),
                                                (False, dict(edge_encoding="simple"))])
def test_traced_model_computes_what_the_eager_one_does(train, options) -> None:
    graphs = mixed_graphs()
    eager, _ = model_pair(torch.float64, multi_hop_max_dist=5, **options)
    traced = copy.deepcopy(eager)
    traced.encode = torch.compile(traced.encode, backend="aot_eager", fullgraph=True)
    batch = GridGraphs(graphs, multi_hop_max_dist=5).batch(torch.arange(len(graphs)), 32)
    assert_same(run(eager, batch, train, False), run(traced, batch, train, False), 1e-12)


def test_traced_dropout_keeps_one_minus_p_and_scales() -> None:
    torch.manual_seed(0)
    x = torch.ones(200_000, dtype=torch.float64)
    out = torch.compile(dropout, backend="aot_eager", fullgraph=True)(x, 0.25, True)
    assert set(out.unique().tolist()) == {0.0, 4 / 3}
    assert abs(float((out > 0).double().mean()) - 0.75) < 0.005  # 5 standard deviations
    assert torch.equal(dropout(x, 0.25, False), x)


def on_padded_heads(model: Graphormer) -> Graphormer:
    """``model`` with the CUDA wing's attention on any device (the wing checks for CUDA)."""
    for module in model.modules():
        if isinstance(module, BiasedMultiheadAttention):
            module.fast_attend = padded_attention
    return model


@pytest.mark.parametrize("graph_token_only", [False, True])
def test_padded_heads_compute_what_the_reference_does(graph_token_only) -> None:
    graphs = mixed_graphs()
    reference, _ = model_pair(torch.float64, multi_hop_max_dist=5)  # head size 4: padded to 8
    padded = on_padded_heads(copy.deepcopy(reference))
    batch = GridGraphs(graphs, multi_hop_max_dist=5).batch(torch.arange(len(graphs)), 32)
    expected = run(reference, batch, True, graph_token_only)
    assert_same(expected, run(padded, batch, True, graph_token_only), 1e-10)


def test_the_cuda_wing_applies_on_cuda_tensors_only() -> None:
    reference, _ = model_pair(torch.float64, multi_hop_max_dist=5)
    batch = GridGraphs(mixed_graphs(), multi_hop_max_dist=5).batch(torch.arange(4), 32)
    auto = set_backend(copy.deepcopy(reference), "auto").eval()
    torch.testing.assert_close(auto(batch), reference.eval()(batch))  # the reference's, here
    with pytest.raises(ValueError, match="CUDA tensors only"):
        set_backend(copy.deepcopy(reference), "cuda")(batch)


def two_replicas() -> tuple[Graphormer, Graphormer, GridBatch]:
    """Two float64 models (the second's weights 1.5x the first's) and a batch of 5 graphs each."""
    store = GridGraphs(mixed_graphs(), multi_hop_max_dist=5)
    first, _ = model_pair(torch.float64, multi_hop_max_dist=5)
    second = copy.deepcopy(first)
    with torch.no_grad():
        for parameter in second.parameters():
            parameter.mul_(1.5)
    return first, second, store.batch(torch.arange(10).view(2, 5), 32)


def test_packed_replicas_on_padded_heads() -> None:
    """Under vmap too: the padded path of each replica is its single model's function."""
    first, second, batch = two_replicas()
    explicit = PackedReplicas([first, second])
    out = explicit.train()(batch)
    out.pow(2).sum().backward()
    padded = PackedReplicas([on_padded_heads(first), second])
    with sdpa_kernel(SDPBackend.MATH):  # the CPU's flash kernel has no gradient for the bias
        out_padded = padded.train()(batch)
    out_padded.pow(2).sum().backward()
    torch.testing.assert_close(out_padded, out, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(padded.flat.grad, explicit.flat.grad, rtol=1e-10, atol=1e-10)


def test_packed_padded_heads_compiled_with_the_cuda_backends() -> None:
    """The CUDA wing's backend choice (:data:`~.attention.SDPA_BACKENDS`, under
    ``sdpa_kernel``) traces in one graph under ``vmap`` and differentiates the bias there as
    the explicit attention does (on the CPU the math kernel is the one allowed)."""
    first, second, batch = two_replicas()
    explicit = PackedReplicas([first, second]).train()
    explicit(batch).pow(2).sum().backward()
    padded = PackedReplicas([on_padded_heads(first), second]).train()
    forward = torch.compile(padded, backend="aot_eager", fullgraph=True)
    out = forward(batch)
    out.pow(2).sum().backward()
    torch.testing.assert_close(out, explicit(batch), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(padded.flat.grad, explicit.flat.grad, rtol=1e-10, atol=1e-10)


def math_kernel(calls: list[tuple[bool, tuple[int, ...]]]):
    """A CPU stand-in for :data:`~.attention.EFFICIENT_KERNEL` recording what it is asked
    (log-sum-exp or not, the bias's strides) and computing SDPA's math."""

    def kernel(q, k, v, bias, compute_log_sumexp, dropout_p, is_causal, *, scale):
        calls.append((compute_log_sumexp, bias.stride()))
        with sdpa_kernel(SDPBackend.MATH):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p,
                                                 scale=scale)
        return out, None, None, None

    return kernel


def test_efficient_kernel_is_asked_for_its_statistics_under_vmap(monkeypatch) -> None:
    """Packed replicas on CUDA: the kernel is asked for the backward's log-sum-exp although no
    input reports requires_grad under vmap (an H200's backward failed without it), its bias
    rows 16-aligned as SDPA pads them; the replicas' outputs and gradients are the explicit
    attention's, eager and compiled."""
    first, second, batch = two_replicas()
    explicit = PackedReplicas([first, second]).train()
    explicit(batch).pow(2).sum().backward()
    calls: list[tuple[bool, tuple[int, ...]]] = []
    monkeypatch.setattr(cuda_attention, "uses_efficient_kernel", lambda q: True)
    monkeypatch.setattr(cuda_attention, "EFFICIENT_KERNEL", math_kernel(calls))
    on_padded_heads(first)
    for compiled in (False, True):
        padded = PackedReplicas([first, second]).train()
        forward = torch.compile(padded, backend="aot_eager", fullgraph=True) if compiled \
            else padded
        out = forward(batch)
        out.pow(2).sum().backward()
        torch.testing.assert_close(out, explicit(batch), rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(padded.flat.grad, explicit.flat.grad, rtol=1e-10,
                                   atol=1e-10)
    assert calls and all(lse and strides[-2] % 16 == 0 for lse, strides in calls)
    calls.clear()
    with torch.no_grad():
        padded(batch)
    assert calls and not any(lse for lse, _ in calls)
