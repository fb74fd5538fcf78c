"""Attention read from and written to token rows (the op; its CPU reference computes it here).

The contract: with the op, token rows in attention sequences compute what the gathers and SDPA
compute, in float64 (outputs, tokens, every gradient, statistics), one model and packed
replicas (the op's ``vmap`` rule); the ownership of rows and positions by hand; the op compiles.
The Triton kernels themselves are checked against :func:`row_attention.reference` by
``tests/gpu/test_row_attention_kernels.py`` (a GPU, or Triton's interpreter in the image twin).
"""

import copy

import numpy as np
import pytest
import torch
from data.test_grid import mixed_graphs
from nn.test_backends import assert_same, model_pair, run
from nn.test_token_rows import sequence_batches

from graphormer_sepnorm.data.grid import GridGraphs
from graphormer_sepnorm.nn import row_attention
from graphormer_sepnorm.training.packed import PackedReplicas


def forced(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Token rows take the op on the CPU (its reference); returns the list its calls fill."""
    calls = []
    original = row_attention.attend
    monkeypatch.setattr(row_attention, "applies", lambda rows, length: True)
    monkeypatch.setattr(row_attention, "attend",
                        lambda *a: calls.append(1) or original(*a))
    return calls


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("options", [dict(), dict(sepnorm=False)])
def test_row_attention_computes_what_the_gathers_do(train, options, monkeypatch) -> None:
    model, _ = model_pair(torch.float64, multi_hop_max_dist=5, **options)
    op_model = copy.deepcopy(model)
    store = GridGraphs(mixed_graphs(), multi_hop_max_dist=5)
    _, placed = sequence_batches(store, np.arange(len(store)), int(store.sizes.sum()) + 7)
    expected = run(model, placed, train, graph_token_only=False)
    calls = forced(monkeypatch)
    poisoned(monkeypatch)
    got = run(op_model, placed, train, graph_token_only=False)
    assert_same(expected, got, 1e-10)
    assert len(calls) == 3  # each layer's


def test_packed_replicas_fold_into_one_call(monkeypatch) -> None:
    model, _ = model_pair(torch.float64, multi_hop_max_dist=5)
    store = GridGraphs(mixed_graphs(), multi_hop_max_dist=5)
    _, placed = sequence_batches(store, np.array([[0, 1, 2, 3, 4], [9, 8, 7, 6, 5]]), 80)
    results = []
    for force in (False, True):
        with monkeypatch.context() as patch:
            calls = forced(patch) if force else []
            if force:
                poisoned(patch)
            packed = PackedReplicas([copy.deepcopy(model), copy.deepcopy(model)]).train()
            out = packed(placed)
            out.pow(2).sum().backward()
            results.append((out.detach(), packed.flat.grad.clone(), len(calls)))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(results[0][1], results[1][1], rtol=1e-10, atol=1e-10)
    assert results[1][2] == 2  # the last layer: graph tokens only, on the grid


def poisoned(monkeypatch: pytest.MonkeyPatch) -> None:
    """The op's bias gradient NaN outside pairs of one graph, where it is unspecified.

    The kernels leave it unwritten there; a caller that let it through would show NaN.
    """
    original = row_attention._row_attention_backward

    def backward(grad, x, weight, qkv_bias, sequence_row, row_sequence, sequence_graph, bias,
                 *rest):
        grad_qkv, grad_bias, sums = original(grad, x, weight, qkv_bias, sequence_row,
                                             row_sequence, sequence_graph, bias, *rest)
        graph = sequence_graph.view(bias.shape[:2]).unsqueeze(-1)
        pairs = (graph == graph.transpose(1, 2)) & (graph >= 0)
        return grad_qkv, grad_bias.masked_fill(~pairs.unsqueeze(-1), float("nan")), sums

    monkeypatch.setattr(row_attention, "_row_attention_backward", backward)


def by_hand() -> tuple[torch.Tensor, ...]:
    """Two sequences of 4: graph A (token row 0, atoms 2, 3) and graph B (row 1, atom 4).

    Row 5 is padding (it points at position 3, which row 4 does not own: B is at 4, 5);
    positions 3, 6 and 7 are padding (they point at rows 1, 2 and 0).
    """
    sequence_row = torch.tensor([0, 2, 3, 1, 1, 4, 2, 0])
    row_sequence = torch.tensor([0, 4, 1, 2, 5, 3])
    graph = torch.tensor([[0, 0, 0, -1], [1, 1, -1, -1]])
    # heads last, [S, L, L, H]; the op reads it at pairs of one graph only
    bias = torch.randn(2, 4, 4, 2, dtype=torch.float64)
    return sequence_row, row_sequence, graph, bias


def test_ownership_by_hand() -> None:
    sequence_row, row_sequence, graph, bias = by_hand()
    owned = row_attention.owned_rows(sequence_row, row_sequence)
    assert owned.tolist() == [True, True, True, True, True, False]
    x, weight, qkv_bias = (torch.randn(*shape, dtype=torch.float64)
                           for shape in ((6, 4), (12, 4), (12,)))
    out = row_attention.attend(x, weight, qkv_bias, sequence_row, row_sequence, graph, bias,
                               0.0, 0.5)
    assert not out[5].any()  # the padding row
    # row 4 (B's atom) attends over B's two tokens only: rows 1 and 4 (plus the bias)
    q, k, v = (x @ weight.T + qkv_bias).view(6, 3, 2, 2).unbind(1)
    for head in range(2):
        scores = (k[[1, 4], head] @ q[4, head]) * 0.5 + bias[1, 1, :2, head]
        expected = scores.softmax(0) @ v[[1, 4], head]
        torch.testing.assert_close(out[4].view(2, 2)[head], expected)


def inputs() -> tuple[torch.Tensor, ...]:
    """``by_hand()``'s maps and bias, and rows, a weight and a bias that need gradients."""
    sequence_row, row_sequence, graph, bias = by_hand()
    x, weight, qkv_bias = (torch.randn(*shape, dtype=torch.float64, requires_grad=True)
                           for shape in ((6, 4), (12, 4), (12,)))
    return x, weight, qkv_bias, sequence_row, row_sequence, graph, bias.requires_grad_()


def test_graph_pairs_by_hand() -> None:
    _, _, graph, bias = by_hand()
    paired = row_attention.graph_pairs(graph, bias)
    inf = float("-inf")
    # sequence 1: graph B at positions 0, 1, padding at 2, 3
    assert paired[1, :, :, 0].tolist() == [[bias[1, 0, 0, 0].item(), bias[1, 0, 1, 0].item(),
                                            inf, inf],
                                           [bias[1, 1, 0, 0].item(), bias[1, 1, 1, 0].item(),
                                            inf, inf],
                                           [inf, inf, 0.0, 0.0], [inf, inf, 0.0, 0.0]]
    torch.testing.assert_close(paired[0, :3, :3], bias[0, :3, :3])
    assert paired[0, 3, :3].eq(inf).all() and paired[0, :3, 3].eq(inf).all()
    assert paired[0, 3, 3].eq(0).all()


def test_compiled_op_equals_eager() -> None:
    x, weight, qkv_bias, sequence_row, row_sequence, graph, bias = inputs()

    def step(function):
        out = function(x, weight, qkv_bias, sequence_row, row_sequence, graph, bias, 0.0, 0.5)
        return (out, *torch.autograd.grad(out.sin().sum(), (x, weight, qkv_bias, bias)))

    eager = step(row_attention.attend)
    compiled = step(torch.compile(row_attention.attend, backend="aot_eager", fullgraph=True))
    for a, b in zip(eager, compiled, strict=True):
        torch.testing.assert_close(a, b)


def test_reference_dropout_keeps_one_minus_p_and_follows_the_seed() -> None:
    shape = torch.Size([8, 4, 32, 32])
    keep = row_attention.keep_mask(torch.tensor([7]), shape, 0.25)
    assert abs(keep.double().mean().item() - 0.75) < 0.01
    assert torch.equal(keep, row_attention.keep_mask(torch.tensor([7]), shape, 0.25))
    assert not torch.equal(keep, row_attention.keep_mask(torch.tensor([8]), shape, 0.25))
    assert row_attention.keep_mask(torch.tensor([7]), shape, 0.0) is None


def test_applies_only_where_its_kernels_run(monkeypatch) -> None:
    qkv = torch.zeros(4, 12)
    monkeypatch.setattr(row_attention, "INTERPRET", False)
    assert not row_attention.applies(qkv, 48)  # the CPU
    monkeypatch.setattr(row_attention, "INTERPRET", True)
    monkeypatch.setattr(row_attention, "HAS_TRITON", True)
    monkeypatch.setattr(row_attention, "verified", lambda device: True)
    assert row_attention.applies(qkv, row_attention.MAX_LENGTH)
    assert not row_attention.applies(qkv, row_attention.MAX_LENGTH + 16)
    monkeypatch.setattr(row_attention, "ENABLED", False)
    assert not row_attention.applies(qkv, 48)


def test_kernels_that_fail_or_disagree_are_not_used(monkeypatch) -> None:
    def broken(*args):
        raise RuntimeError("no such kernel")

    def wrong(x, weight, qkv_bias, sequence_row, row_sequence, graph, bias, dropout_p, scale):
        return 2 * row_attention.reference(x, weight, qkv_bias, sequence_row, row_sequence,
                                           graph, bias, scale)

    cpu = torch.device("cpu")
    for attend, message in ((broken, "failed on cpu"), (wrong, "disagree"),
                            (row_attention.attend, None)):
        monkeypatch.setattr(row_attention, "_VERIFIED", {})
        monkeypatch.setattr(row_attention, "attend", attend)
        if message is None:  # the CPU reference checks out against itself
            assert row_attention.verified(cpu)
            continue
        with pytest.warns(UserWarning, match=message):
            assert not row_attention.verified(cpu)
        assert row_attention._VERIFIED == {"cpu": False}
        assert not row_attention.verified(cpu)  # cached: no second check, no second warning


def test_no_check_inside_vmap_and_prepare_checks_where_kernels_run(monkeypatch) -> None:
    monkeypatch.setattr(row_attention, "_VERIFIED", {})
    inside = torch.vmap(lambda x: x + row_attention.verified(torch.device("cpu")))(
        torch.zeros(2))
    assert inside.tolist() == [0.0, 0.0] and row_attention._VERIFIED == {}
    checked = []
    monkeypatch.setattr(row_attention, "verified", lambda device: checked.append(str(device)))
    monkeypatch.setattr(row_attention, "HAS_TRITON", True)
    monkeypatch.setattr(row_attention, "INTERPRET", False)
    row_attention.prepare(torch.device("cpu"))
    row_attention.prepare("cuda:1")
    monkeypatch.setattr(row_attention, "INTERPRET", True)
    row_attention.prepare("cpu")
    monkeypatch.setattr(row_attention, "ENABLED", False)
    row_attention.prepare("cuda:0")
    assert checked == ["cuda:1", "cpu"]


def test_the_ops_gradients_are_the_references() -> None:
    # the op's backward: the projection's gradient, two products and the per-sequence sums
    x, weight, qkv_bias, sequence_row, row_sequence, graph, bias = inputs()
    wrt = (x, weight, qkv_bias, bias)
    out = row_attention.attend(x, weight, qkv_bias, sequence_row, row_sequence, graph, bias, 0.0,
                               0.5)
    expected = row_attention.reference(x, weight, qkv_bias, sequence_row, row_sequence, graph,
                                       bias, 0.5)
    torch.testing.assert_close(out, expected)
    for got, want in zip(torch.autograd.grad(out.sin().sum(), wrt),
                         torch.autograd.grad(expected.sin().sum(), wrt), strict=True):
        torch.testing.assert_close(got, want)


def test_backward_sums_the_projection_gradient_per_sequence() -> None:
    x, weight, qkv_bias, sequence_row, row_sequence, graph, bias = inputs()
    grad = torch.randn(6, 4, dtype=torch.float64)
    grad_qkv, _, sums = row_attention._row_attention_backward(
        grad, x, weight[None], qkv_bias[None], sequence_row, row_sequence, graph.view(-1), bias,
        torch.zeros(1, dtype=torch.long), 0.0, 0.5)
    assert not grad_qkv[5].any()  # the padding row owns nothing
    # sequence 0 holds graph A (rows 0, 2, 3), sequence 1 graph B (rows 1, 4)
    torch.testing.assert_close(sums, torch.stack([grad_qkv[[0, 2, 3]].sum(0),
                                                  grad_qkv[[1, 4]].sum(0)]))
