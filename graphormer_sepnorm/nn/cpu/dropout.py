"""Dropout on the CPU: the fused C kernel where it runs, else a cheap ``uint8`` mask."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from graphormer_sepnorm.nn.cpu.native import LEVELS, drop_levels, fused_dropout, keep_scale

__all__ = ["apply_mask", "dropout", "keep_mask", "keep_scale"]


def keep_mask(shape: torch.Size | tuple[int, ...], p: float,
              generator: torch.Generator | None = None) -> tuple[Tensor, float]:
    """A CPU dropout mask from 16-bit slices of 64-bit random words, and its rescale factor.

    ``torch.bernoulli`` (one draw an element) took a third of a CPU training step; four 16-bit
    slices of each word of NumPy's SFC64 generator (twice as fast as torch's Mersenne Twister)
    cost a quarter of the calls. Seeded with one draw from ``generator``, so seeding torch keeps
    masks reproducible. ``uint8``, not ``bool``: on the CPU, products with a ``bool`` tensor are
    10x slower. ``p`` is rounded to 65,536ths (:func:`~.native.keep_scale`).

    Args:
        shape: the mask's shape.
        p: drop probability.
        generator: the random generator; default torch's global one.

    Returns:
        A ``uint8`` 0/1 mask of ``shape`` and ``1 / keep rate``.
    """
    numel = math.prod(shape)
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    count = max((numel + 3) // 4, 1)  # an empty draw would not view as int16
    words = torch.from_numpy(np.random.SFC64(seed).random_raw(count).view(np.int64))
    keep = torch.empty(shape, dtype=torch.uint8)
    torch.ge(words.view(torch.int16)[:numel].view(shape), drop_levels(p) - LEVELS // 2, out=keep)
    return keep, keep_scale(p)


def apply_mask(x: Tensor, keep: Tensor, scale: float) -> Tensor:
    """``x * keep * scale`` for a ``uint8`` mask, in three vectorized passes."""
    return keep.to(x.dtype).mul_(scale).mul_(x)


class _MaskedScale(torch.autograd.Function):
    """``x * keep * scale`` keeping only the ``uint8`` mask for backward (not 4 bytes a float)."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: Tensor, keep: Tensor,
                scale: float) -> Tensor:
        ctx.scale = scale
        ctx.save_for_backward(keep)
        return apply_mask(x, keep, scale)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx,
                 grad: Tensor) -> tuple[Tensor, None, None]:
        (keep,) = ctx.saved_tensors
        return apply_mask(grad, keep, ctx.scale), None, None


def dropout(x: Tensor, p: float, training: bool = True, residual: Tensor | None = None) -> Tensor:
    """Inverted dropout of ``x``, added to ``residual`` when given.

    On the CPU the fused kernel where usable (float32, contiguous), else the ``uint8`` mask of
    :func:`keep_mask`; elsewhere ``F.dropout``.
    """
    if not training or p == 0.0:
        return x if residual is None else residual + x
    if 0.0 < p < 1.0 and fused_dropout.takes(x, residual):
        return fused_dropout.fused_dropout(x, p, residual)
    if x.device.type != "cpu" or not 0.0 < p < 1.0:
        dropped = F.dropout(x, p, training)
    else:
        keep, scale = keep_mask(x.shape, p)
        if x.requires_grad and torch.is_grad_enabled():
            dropped = _MaskedScale.apply(x, keep, scale)
        else:
            dropped = apply_mask(x, keep, scale)
    return dropped if residual is None else residual + dropped
