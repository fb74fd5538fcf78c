"""The row attention's Triton kernels against :func:`row_attention.reference`.

On a GPU (the lease's smoke check) compiled; with ``GRAPHORMER_SEPNORM_GPU_TESTS_DEVICE=cpu``
(``make image-rehearsal``, the image twin) through Triton's interpreter on CPU tensors. Skipped
where Triton is missing (the project's CPU wheel has none). Outputs and both gradients against
the reference, orphans zero, dropout's keep rate, its mask the same in the backward as in the
forward (a float64 gradient check), and a model's token rows through the kernels computing what
they compute with the gathers.
"""

import copy
import importlib.util
import os

import numpy as np
import pytest
import torch

DEVICE = torch.device(os.environ.get("GRAPHORMER_SEPNORM_GPU_TESTS_DEVICE", "cuda"))
if DEVICE.type == "cpu":
    # @triton.jit reads it as it decorates, Triton's own library too: before anything imports
    # Triton (torch.compile does), so `make image-rehearsal` sets it for the whole process
    os.environ["TRITON_INTERPRET"] = "1"

from graphormer_sepnorm.nn import row_attention  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(DEVICE.type == "cuda" and not torch.cuda.is_available(),
                                 reason="needs CUDA"),
              pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                 reason="needs Triton")]
#: float64 on the interpreter; on a GPU float32 (whose products are TF32: a looser tolerance)
DTYPE = torch.float64 if DEVICE.type == "cpu" else torch.float32
TOLERANCE = 1e-9 if DEVICE.type == "cpu" else 2e-2


@pytest.fixture(autouse=True)
def kernels_on_this_device(monkeypatch):
    monkeypatch.setattr(row_attention, "INTERPRET", DEVICE.type == "cpu")
    # the bias gradient's memory NaN before the kernels run: they must write it at pairs of
    # one graph only (the rest is unspecified, and a caller that read it would see NaN)
    original = row_attention._empty_gradients

    def poisoned(*args):
        grad_qkv, grad_bias, sums = original(*args)
        return grad_qkv, grad_bias.fill_(float("nan")), sums

    monkeypatch.setattr(row_attention, "_empty_gradients", poisoned)


def pairs_of(graph: torch.Tensor) -> torch.Tensor:
    """``[S, L, L, 1]``: the pairs of one graph of ``graph`` ``[S, L]``."""
    graph = graph.unsqueeze(-1)
    return ((graph == graph.transpose(1, 2)) & (graph >= 0)).unsqueeze(-1)


def assert_bias_gradient(got: torch.Tensor, want: torch.Tensor, graph: torch.Tensor,
                         **close) -> None:
    """The kernels' bias gradient the reference's at pairs of one graph, unwritten elsewhere."""
    pairs = pairs_of(graph).expand_as(got)
    torch.testing.assert_close(got[pairs], want[pairs], **close)
    assert got[~pairs].isnan().all() and not want[~pairs].any()


def packed(sizes: list[int], count: int, length: int, padding_rows: int, seed: int = 0):
    """Maps and a bias for graphs of ``sizes`` atoms in ``count`` sequences of ``length``.

    Graph tokens are rows ``0..B-1``, atoms follow, then padding rows (pointing at random
    positions); padding positions point at random real rows and share graph ``-1``. The bias is
    random at every pair (the op reads pairs of one graph only).
    """
    generator = torch.Generator().manual_seed(seed)
    graphs, atoms = len(sizes), sum(sizes)
    sequence_row = torch.randint(0, graphs + atoms, (count * length,), generator=generator)
    row_sequence = torch.randint(0, count * length, (graphs + atoms + padding_rows,),
                                 generator=generator)
    graph = torch.full((count * length,), -1)
    fill, atom = [0] * count, graphs
    for index, size in enumerate(sizes):
        sequence = min(range(count), key=fill.__getitem__)
        first = sequence * length + fill[sequence]
        rows = [index, *range(atom, atom + size)]
        positions = torch.arange(first, first + size + 1)
        sequence_row[positions], graph[positions] = torch.tensor(rows), index
        row_sequence[rows] = positions
        fill[sequence], atom = fill[sequence] + size + 1, atom + size
    assert max(fill) <= length
    graph = graph.view(count, length)
    bias = torch.randn(count, length, length, 4, generator=generator, dtype=DTYPE)  # heads last
    return (sequence_row.to(DEVICE), row_sequence.to(DEVICE), graph.to(DEVICE),
            bias.to(DEVICE), graphs + atoms + padding_rows)


def projection(rows: int, replicas: int = 0, seed: int = 1) -> tuple[torch.Tensor, ...]:
    """Rows ``[rows, 40]``, a weight ``[120, 40]`` and a bias ``[120]`` (``replicas`` of each
    if given), needing gradients."""
    generator = torch.Generator().manual_seed(seed)
    lead = (replicas,) if replicas else ()
    return tuple((torch.randn(*shape, generator=generator, dtype=DTYPE) * scale).to(DEVICE)
                 .requires_grad_() for shape, scale in (((rows, 40), 1.0),
                                                        ((*lead, 120, 40), 40**-0.5),
                                                        ((*lead, 120), 1.0)))


def test_kernels_compute_the_reference() -> None:
    sequence_row, row_sequence, graph, bias, rows = packed([3, 7, 1, 12, 5, 9, 2, 30], 3, 48, 5)
    x, weight, qkv_bias = projection(rows)
    bias.requires_grad_()
    out = row_attention.attend(x, weight, qkv_bias, sequence_row, row_sequence, graph, bias,
                               0.0, 10**-0.5)
    expected = row_attention.reference(x, weight, qkv_bias, sequence_row, row_sequence, graph,
                                       bias, 10**-0.5)
    grad = torch.randn(out.shape, dtype=DTYPE).to(DEVICE)
    got = torch.autograd.grad(out, (x, weight, qkv_bias, bias), grad)
    want = torch.autograd.grad(expected, (x, weight, qkv_bias, bias), grad)
    close = dict(atol=TOLERANCE, rtol=TOLERANCE)
    torch.testing.assert_close(out, expected, **close)
    assert not out[-5:].any() and not got[0][-5:].any()  # the padding rows own nothing
    for a, b in zip(got[:3], want[:3], strict=True):
        torch.testing.assert_close(a, b, **close)
    assert_bias_gradient(got[3], want[3], graph, **close)


def test_each_replicas_sequences_take_its_projection() -> None:
    # two replicas' rows and sequences side by side, as the op's vmap rule folds them
    first, second = packed([3, 7, 1, 12], 2, 32, 3), packed([9, 2, 5], 2, 32, 11, seed=1)
    rows = first[4]
    assert rows == second[4]
    sequence_row = torch.cat([first[0], second[0] + rows])
    row_sequence = torch.cat([first[1], second[1] + len(first[0])])
    graph = torch.cat([first[2], second[2]])
    bias = torch.cat([first[3], second[3]]).requires_grad_()
    x, weight, qkv_bias = projection(2 * rows, replicas=2)
    seed = torch.zeros(1, dtype=torch.long, device=DEVICE)
    out = row_attention._row_attention(x, weight, qkv_bias, sequence_row, row_sequence,
                                       graph.view(-1), bias, seed, 0.0, 0.5)
    expected = row_attention.reference(x, weight, qkv_bias, sequence_row, row_sequence, graph,
                                       bias, 0.5)
    grad = torch.randn(out.shape, dtype=DTYPE).to(DEVICE)
    close = dict(atol=TOLERANCE, rtol=TOLERANCE)
    torch.testing.assert_close(out, expected, **close)
    got = torch.autograd.grad(out, (x, weight, qkv_bias, bias), grad)
    want = torch.autograd.grad(expected, (x, weight, qkv_bias, bias), grad)
    for a, b in zip(got[:3], want[:3], strict=True):
        torch.testing.assert_close(a, b, **close)
    assert_bias_gradient(got[3], want[3], graph, **close)


def test_dropout_keeps_one_minus_p_and_differentiates_its_own_mask() -> None:
    sequence_row, row_sequence, graph, bias, rows = packed([10] * 12, 4, 48, 0)
    # q = k = 0 and v = 1 (a zero weight, v's bias 1): each output is the kept share of its
    # probabilities / (1 - p)
    x = torch.randn(rows, 40, device=DEVICE, dtype=DTYPE)
    weight = torch.zeros(1, 120, 40, device=DEVICE, dtype=DTYPE)
    ones = torch.cat([torch.zeros(1, 80), torch.ones(1, 40)], 1).to(DEVICE, DTYPE)
    out = row_attention.attend(x, weight[0], ones[0], sequence_row, row_sequence, graph,
                               torch.zeros_like(bias), 0.25, 0.5)
    assert abs(out.mean().item() - 1.0) < 0.03
    seed = torch.tensor([1234], device=DEVICE)
    x, weight, qkv_bias = projection(rows)
    same, again = (row_attention._row_attention(x, weight[None], qkv_bias[None], sequence_row,
                                                row_sequence, graph.view(-1), bias, seed, 0.25,
                                                0.5)
                   for _ in range(2))
    assert torch.equal(same, again)
    if DTYPE != torch.float64:
        return
    small_row, small_sequence, small_graph, small_bias, small_rows = packed([3, 5, 2], 2, 16, 2)
    # the bias's gradient is specified at pairs of one graph: those values vary
    pairs = pairs_of(small_graph).expand_as(small_bias)
    values = small_bias[pairs].clone().requires_grad_()
    x, weight, qkv_bias = projection(small_rows, replicas=1)

    def attention(x, weight, qkv_bias, values):
        bias = small_bias.masked_scatter(pairs, values)
        return row_attention._row_attention(x, weight, qkv_bias, small_row, small_sequence,
                                            small_graph.view(-1), bias, seed, 0.3, 0.5)

    assert torch.autograd.gradcheck(attention, (x, weight, qkv_bias, values), eps=1e-6,
                                    atol=1e-6, fast_mode=True)


def test_token_rows_through_the_kernels_compute_what_the_gathers_do(monkeypatch) -> None:
    from data.test_grid import mixed_graphs
    from nn.test_backends import model_pair, run
    from nn.test_token_rows import sequence_batches

    from graphormer_sepnorm.data.grid import GridGraphs

    model, _ = model_pair(DTYPE, multi_hop_max_dist=5)
    model = model.to(DEVICE)
    store = GridGraphs(mixed_graphs(), multi_hop_max_dist=5)
    _, placed = sequence_batches(store, np.arange(len(store)), int(store.sizes.sum()) + 7)
    placed = placed.to(DEVICE)
    assert row_attention.verified(DEVICE)  # the first use's check passes (bf16, dropout)
    calls = []
    original = row_attention.attend
    results = []
    for enabled in (False, True):
        monkeypatch.setattr(row_attention, "ENABLED", enabled)
        monkeypatch.setattr(row_attention, "attend", lambda *a: calls.append(1) or original(*a))
        results.append(run(copy.deepcopy(model), placed, True, graph_token_only=False))
    assert len(calls) == 3
    (out, tokens, grads, _), (out2, tokens2, grads2, _) = results
    close = dict(atol=TOLERANCE * 10, rtol=TOLERANCE * 10)
    torch.testing.assert_close(out, out2, **close)
    torch.testing.assert_close(tokens, tokens2, **close)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, grads2[name], **close, msg=name)
