"""SepNorm's default pair (BatchNorm on the graph token, LayerNorm on the atoms) as one Function.

Composed from autograd operators, the pair clones the whole ``[T, D]`` gradient and adds a
zero-padded copy of the graph tokens' in backward; here backward runs both norms' kernels once
and overwrites the graph tokens' rows of the input gradient in place (1-3% of a training step,
``docs/results/cpu_training_speed.md``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.autograd.function import FunctionCtx, once_differentiable


class _LayerNormBatchNormFirst(torch.autograd.Function):
    @staticmethod
    def forward(ctx: FunctionCtx, x: Tensor, first_rows: Tensor, ln_weight: Tensor,
                ln_bias: Tensor, bn_weight: Tensor, bn_bias: Tensor, running_mean: Tensor,
                running_var: Tensor, batch_stats: bool, momentum: float, ln_eps: float,
                bn_eps: float) -> Tensor:
        dim = x.shape[-1]
        out, mean, rstd = torch.native_layer_norm(x, (dim,), ln_weight, ln_bias, ln_eps)
        # a contiguous copy: BatchNorm's CPU kernels take 2-3x longer on strided rows. Updates
        # the running statistics in place when batch_stats, as BatchNorm1d does.
        x_first = x.index_select(0, first_rows)
        first, save_mean, save_invstd = torch.native_batch_norm(
            x_first, bn_weight, bn_bias, running_mean, running_var, batch_stats, momentum, bn_eps)
        out.index_copy_(0, first_rows, first)
        ctx.save_for_backward(x, first_rows, x_first, mean, rstd, ln_weight, ln_bias, bn_weight,
                              running_mean, running_var, save_mean, save_invstd)
        ctx.batch_stats, ctx.bn_eps = batch_stats, bn_eps  # type: ignore[attr-defined]
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad: Tensor) -> tuple[Tensor | None, ...]:
        x, rows, x_first, mean, rstd, ln_weight, ln_bias, bn_weight, running_mean, \
            running_var, save_mean, save_invstd = ctx.saved_tensors  # type: ignore[attr-defined]
        need = ctx.needs_input_grad  # type: ignore[attr-defined]
        grad = grad.contiguous()
        grad_first = grad.index_select(0, rows)
        if len(rows) == x.shape[0]:
            # Only graph tokens (the last layer's FFN norm, the final norm): LayerNorm's output is
            # all replaced. Its gradients are exact zeros, not a difference of equal sums: AdamW
            # would turn rounding noise into steps of the learning rate.
            grad_x = torch.zeros_like(x)
            grad_ln_weight = torch.zeros_like(ln_weight) if need[2] else None
            grad_ln_bias = torch.zeros_like(ln_bias) if need[3] else None
        else:
            grad_x, grad_ln_weight, grad_ln_bias = torch.ops.aten.native_layer_norm_backward(
                grad, x, (x.shape[-1],), mean, rstd, ln_weight, ln_bias, [True, need[2], need[3]])
            if grad_ln_weight is not None:  # the first rows are not LayerNorm's output
                normalized_first = (x_first - mean[rows]) * rstd[rows]
                grad_ln_weight -= (grad_first * normalized_first).sum(0)
            if grad_ln_bias is not None:
                grad_ln_bias -= grad_first.sum(0)
        grad_bn_x, grad_bn_weight, grad_bn_bias = torch.ops.aten.native_batch_norm_backward(
            grad_first, x_first, bn_weight, running_mean, running_var, save_mean, save_invstd,
            ctx.batch_stats, ctx.bn_eps, [True, need[4], need[5]])  # type: ignore[attr-defined]
        grad_x.index_copy_(0, rows, grad_bn_x)
        return (grad_x if need[0] else None, None, grad_ln_weight, grad_ln_bias, grad_bn_weight,
                grad_bn_bias, None, None, None, None, None, None)


def layer_norm_batch_norm_rows(x: Tensor, first_rows: Tensor, layer_norm: nn.LayerNorm,
                               batch_norm: nn.BatchNorm1d, batch_stats: bool) -> Tensor:
    """``layer_norm`` on every row of ``x`` ``[T, D]``, then ``batch_norm`` on ``first_rows``.

    ``first_rows`` ``[B]``: the graph tokens' rows (distinct). ``batch_stats``: normalize them
    with the statistics of the batch and update the running ones (training), or with the
    running ones (evaluation, or a training batch of one graph).
    """
    if batch_stats:
        batch_norm.num_batches_tracked.add_(1)
    return _LayerNormBatchNormFirst.apply(
        x, first_rows, layer_norm.weight, layer_norm.bias, batch_norm.weight, batch_norm.bias,
        batch_norm.running_mean, batch_norm.running_var, batch_stats, batch_norm.momentum,
        layer_norm.eps, batch_norm.eps)
