"""SepNorm's fused default pair (the CPU backend) against the reference's composed norms."""

import pytest
import torch

from graphormer_sepnorm.nn import SepNorm
from graphormer_sepnorm.nn.cpu import fused_sepnorm
from graphormer_sepnorm.nn.cpu.encoder import normalize_rows
from graphormer_sepnorm.nn.cpu.fused_sepnorm import _LayerNormBatchNormFirst


def distinct_norm(dtype: torch.dtype) -> SepNorm:
    """A SepNorm whose affine parameters and running statistics are all different numbers."""
    norm = SepNorm(6).to(dtype)
    with torch.no_grad():
        norm.tok_norm.weight.copy_(torch.linspace(0.5, 2.0, 6))
        norm.tok_norm.bias.copy_(torch.linspace(-1.0, 1.0, 6))
        norm.cls_norm.weight.copy_(torch.linspace(2.0, -0.5, 6))
        norm.cls_norm.bias.copy_(torch.linspace(1.0, -1.0, 6))
        norm.cls_norm.running_mean.copy_(torch.linspace(-0.3, 0.3, 6))
        norm.cls_norm.running_var.copy_(torch.linspace(0.5, 2.0, 6))
    return norm


def run(norm: SepNorm, x: torch.Tensor, grad: torch.Tensor, rows: bool) -> list[torch.Tensor]:
    """Output, input gradient, parameter gradients and running statistics after one call.

    ``rows``: through the CPU backend's :func:`normalize_rows` on ``[B * L, D]``, else the
    reference ``norm(x)``.
    """
    x = x.clone().requires_grad_()
    if rows:
        b, length, dim = x.shape
        first = torch.arange(0, b * length, length)
        out = normalize_rows(norm, x.reshape(b * length, dim), first).view(b, length, dim)
    else:
        out = norm(x)
    inputs = [x, *norm.parameters()]
    grads = torch.autograd.grad((out * grad).sum(), inputs, allow_unused=True)
    grads = [torch.zeros_like(i) if g is None else g for i, g in zip(inputs, grads, strict=True)]
    return [out.detach(), *grads, *(b.clone() for b in norm.cls_norm.buffers())]


@pytest.mark.parametrize("training, graphs, tokens",
                         [(True, 5, 4), (True, 1, 4), (False, 5, 4), (True, 5, 1)])
def test_fused_pair_equals_composed_norms(monkeypatch, training, graphs, tokens):
    gen = torch.Generator().manual_seed(graphs)
    x = torch.randn(graphs, tokens, 6, dtype=torch.float64, generator=gen) * 3 + 1
    grad = torch.randn(graphs, tokens, 6, dtype=torch.float64, generator=gen)
    fused = distinct_norm(torch.float64).train(training)
    calls = []
    original = fused_sepnorm._LayerNormBatchNormFirst.apply
    monkeypatch.setattr(fused_sepnorm._LayerNormBatchNormFirst, "apply",
                        lambda *a: calls.append(a) or original(*a))
    got = run(fused, x, grad, rows=True)
    assert len(calls) == 1  # the fused path ran
    composed = distinct_norm(torch.float64).train(training)
    expected = run(composed, x, grad, rows=False)
    # a single-graph training batch is normalized with (and leaves) the running statistics
    assert int(fused.cls_norm.num_batches_tracked) == int(training and graphs > 1)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)
    if tokens == 1:  # graph tokens only: LayerNorm's gradients are exact zeros, not noise
        names = [n for n, _ in fused.named_parameters()]
        parameter_grads = got[2:2 + len(names)]  # after the output and the input's gradient
        for name, g in zip(names, parameter_grads, strict=True):
            assert name.startswith("cls_norm") or not g.any(), name


@pytest.mark.parametrize("batch_stats", [True, False])
def test_fused_pair_gradcheck(batch_stats):
    gen = torch.Generator().manual_seed(0)
    x, ln_w, ln_b, bn_w, bn_b = (
        torch.randn(shape, dtype=torch.float64, generator=gen, requires_grad=True)
        for shape in ((12, 5), (5,), (5,), (5,), (5,)))
    rows = torch.tensor([0, 4, 9])  # three graph tokens among twelve token rows
    running_var = torch.rand(5, dtype=torch.float64, generator=gen) + 0.5

    def fn(x: torch.Tensor, *weights: torch.Tensor) -> torch.Tensor:
        # fresh running statistics each call: batch_stats updates them in place
        return _LayerNormBatchNormFirst.apply(x, rows, *weights,
                                              torch.zeros(5, dtype=torch.float64),
                                              running_var.clone(), batch_stats, 0.1, 1e-5, 1e-5)

    assert torch.autograd.gradcheck(fn, (x, ln_w, ln_b, bn_w, bn_b))
