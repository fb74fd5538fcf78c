"""Biased softmax attention with dropout, lean on memory for backward.

Plain autograd keeps three ``[B*H, Lq, L]`` float tensors per layer (the probabilities for the
softmax, the float dropout mask and the dropped probabilities for the product with ``V``): for a
batch holding a 90-atom molecule, most of the training memory. This function keeps the
probabilities and a bool mask (5 bytes a score instead of 12), or, for large score tensors, only
its inputs and the seed of its mask, recomputing the rest in backward.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

from graphormer_sepnorm.nn.dropout import keep_mask

RECOMPUTE_ABOVE = 1 << 22
"""Score tensors with more elements than this are recomputed in backward instead of kept."""


def _probabilities(q: Tensor, k: Tensor, bias: Tensor, scale: float, p: float,
                   seed: int) -> tuple[Tensor, Tensor | None]:
    """Softmax probabilities and the bool dropout mask (``None`` without dropout)."""
    probs = torch.baddbmm(bias, q, k.transpose(1, 2), alpha=scale).softmax(-1)
    if p == 0:
        return probs, None
    return probs, keep_mask(probs.shape, p, torch.Generator().manual_seed(seed))[0]


class _BiasedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx: FunctionCtx, q: Tensor, k: Tensor, v: Tensor, bias: Tensor, scale: float,
                p: float, recompute: bool) -> Tensor:
        # One draw from the global generator: seeding torch still makes runs reproducible.
        seed = int(torch.randint(0, 2**62, (1,))) if p > 0 else 0
        probs, keep = _probabilities(q, k, bias, scale, p, seed)
        ctx.scale, ctx.p, ctx.seed, ctx.recompute = scale, p, seed, recompute
        ctx.keep_scale = 1.0 if keep is None else keep_mask((0,), p)[1]
        # Either the inputs (recompute) or the probabilities and a bool mask: 5 bytes a score.
        ctx.save_for_backward(q, k, v, bias if recompute else probs, None if recompute else keep)
        if keep is None:
            return torch.bmm(probs, v)
        return torch.bmm(probs * keep.to(probs.dtype).mul_(ctx.keep_scale), v)

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, saved, keep = ctx.saved_tensors
        if ctx.recompute:
            probs, keep = _probabilities(q, k, saved, ctx.scale, ctx.p, ctx.seed)
        else:
            probs = saved
        mask = None if keep is None else keep.to(probs.dtype).mul_(ctx.keep_scale)
        grad_v = torch.bmm(probs.transpose(1, 2) if mask is None
                           else (probs * mask).transpose(1, 2), grad_out)
        grad = torch.bmm(grad_out, v.transpose(1, 2))  # d loss / d dropped probabilities
        if mask is not None:
            grad.mul_(mask)
        # softmax backward: p * (g - sum(g * p))
        grad.sub_((grad * probs).sum(-1, keepdim=True)).mul_(probs)
        grad_q = torch.bmm(grad, k).mul_(ctx.scale)
        grad_k = torch.bmm(grad.transpose(1, 2), q).mul_(ctx.scale)
        return grad_q, grad_k, grad_v, grad, None, None, None


def biased_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, scale: float,
                     p: float = 0.0, recompute: bool | None = None) -> Tensor:
    """``dropout(softmax(scale * q k^T + bias)) v`` on the CPU, lean on memory in backward.

    Args:
        q: ``[G, Lq, d]`` queries (``G`` = batch x heads).
        k: ``[G, L, d]`` keys.
        v: ``[G, L, d]`` values.
        bias: ``[G, Lq, L]`` additive bias (may require grad).
        scale: multiplies the scores, usually ``d ** -0.5``.
        p: dropout on the probabilities, with the mask of
            :func:`~graphormer_sepnorm.nn.dropout.keep_mask`. Default: 0.
        recompute: keep only the inputs and recompute the scores in backward (one more
            ``baddbmm`` and softmax) instead of keeping probabilities and mask. Default: only
            for score tensors above :data:`RECOMPUTE_ABOVE` elements, i.e. batches of large
            molecules, whose scores would dominate memory.

    Returns:
        ``[G, Lq, d]``.
    """
    if recompute is None:
        recompute = bias.numel() > RECOMPUTE_ABOVE
    return _BiasedAttention.apply(q, k, v, bias, scale, p, recompute)
