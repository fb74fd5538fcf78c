"""Biased softmax attention with dropout for the CPU, head dim before positions (the torch path).

Queries, keys and values come as ``[G, d, L]``: with ``d = 10``, MKL's batched products with
only ``d`` output columns run at a third of the speed of the same products transposed (5
against 16 GFLOP/s for 1,024 matrices of 29 x 29 by 29 x 10). Backward keeps the probabilities
and a ``uint8`` mask (5 bytes a score where autograd keeps 12), or for large score tensors only
the inputs and the mask's seed.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

from graphormer_sepnorm.nn.cpu.dropout import keep_mask
from graphormer_sepnorm.nn.cpu.native import keep_scale
from graphormer_sepnorm.nn.cpu.native.fused_attention import RECOMPUTE_ABOVE


def _probabilities(q_t: Tensor, k_t: Tensor, bias: Tensor, scale: float, p: float,
                   seed: int) -> tuple[Tensor, Tensor | None]:
    """Softmax probabilities ``[G, Lq, L]`` and the keep mask (``None`` without dropout)."""
    probs = torch.baddbmm(bias, q_t.transpose(1, 2), k_t, alpha=scale).softmax(-1)
    if p == 0:
        return probs, None
    return probs, keep_mask(probs.shape, p, torch.Generator().manual_seed(seed))[0]


def _dropped(probs: Tensor, keep: Tensor | None) -> Tensor:
    """The probabilities with the dropped ones zeroed (not rescaled: see ``keep_scale``)."""
    return probs if keep is None else keep.to(probs.dtype).mul_(probs)


class _BiasedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx: FunctionCtx, q_t: Tensor, k_t: Tensor, v_t: Tensor, bias: Tensor,
                scale: float, p: float, recompute: bool) -> Tensor:
        # One draw from the global generator: seeding torch still makes runs reproducible.
        seed = int(torch.randint(0, 2**62, (1,))) if p > 0 else 0
        probs, keep = _probabilities(q_t, k_t, bias, scale, p, seed)
        ctx.scale, ctx.p, ctx.seed, ctx.recompute = scale, p, seed, recompute
        # The dropout rescale is applied to the small [G, d, Lq] side, not to the scores.
        ctx.keep_scale = 1.0 if keep is None else keep_scale(p)
        # Either the inputs (recompute) or the probabilities and a uint8 mask: 5 bytes a score.
        ctx.save_for_backward(q_t, k_t, v_t, bias if recompute else probs,
                              None if recompute else keep)
        dropped = _dropped(probs, keep)
        out_t = torch.bmm(v_t, dropped.transpose(1, 2))
        return out_t if keep is None else out_t.mul_(ctx.keep_scale)

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_out_t: Tensor) -> tuple[Tensor | None, ...]:
        q_t, k_t, v_t, saved, keep = ctx.saved_tensors
        if ctx.recompute:
            probs, keep = _probabilities(q_t, k_t, saved, ctx.scale, ctx.p, ctx.seed)
        else:
            probs = saved
        if keep is not None:
            grad_out_t = grad_out_t * ctx.keep_scale
        dropped = _dropped(probs, keep)
        grad_v_t = torch.bmm(grad_out_t, dropped)
        grad = torch.bmm(grad_out_t.transpose(1, 2), v_t)  # d loss / d dropped probabilities
        if keep is not None:
            grad.mul_(keep)
        grad = torch.ops.aten._softmax_backward_data(grad, probs, -1, probs.dtype)
        grad_q_t = torch.bmm(k_t, grad.transpose(1, 2)).mul_(ctx.scale)
        grad_k_t = torch.bmm(q_t, grad).mul_(ctx.scale)
        return grad_q_t, grad_k_t, grad_v_t, grad, None, None, None


def biased_attention(q_t: Tensor, k_t: Tensor, v_t: Tensor, bias: Tensor, scale: float,
                     p: float = 0.0, recompute: bool | None = None) -> Tensor:
    """``(dropout(softmax(scale * q k^T + bias)) v)^T`` on the CPU, in the transposed layout.

    Args:
        q_t: ``[G, d, Lq]`` queries, head dim first (``G`` = batch x heads).
        k_t: ``[G, d, L]`` keys.
        v_t: ``[G, d, L]`` values.
        bias: ``[G, Lq, L]`` additive bias (may require grad).
        scale: multiplies the scores, usually ``d ** -0.5``.
        p: dropout on the probabilities, with the mask of
            :func:`~graphormer_sepnorm.nn.cpu.dropout.keep_mask`. Default: 0.
        recompute: keep only the inputs and recompute the scores in backward instead of
            keeping probabilities and mask. Default: above :data:`RECOMPUTE_ABOVE` scores.

    Returns:
        ``[G, d, Lq]``: the attention output, transposed.
    """
    if recompute is None:
        recompute = bias.numel() > RECOMPUTE_ABOVE
    return _BiasedAttention.apply(q_t, k_t, v_t, bias, scale, p, recompute)
