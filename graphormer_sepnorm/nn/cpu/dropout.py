"""Dropout whose mask is cheap to draw on the CPU.

Two CPU paths: the fused C kernel (:mod:`~graphormer_sepnorm.nn.cpu.native.fused_dropout`: one
pass, the mask a hash drawn again in backward) for float32 where it can be built, and otherwise
a ``uint8`` mask from NumPy's fast generator (:func:`keep_mask`). Elsewhere ``F.dropout``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from graphormer_sepnorm.nn.cpu.drop_rate import LEVELS, drop_levels, keep_scale
from graphormer_sepnorm.nn.cpu.native import fused_dropout

__all__ = ["apply_mask", "dropout", "keep_mask", "keep_scale"]


def keep_mask(shape: torch.Size | tuple[int, ...], p: float,
              generator: torch.Generator | None = None) -> tuple[Tensor, float]:
    """A CPU dropout mask from 16-bit slices of 64-bit random words, and its rescale factor.

    ``torch.bernoulli`` draws one random number per element and dominated CPU training time (a
    third of a Graphormer step). Four 16-bit slices of each 64-bit word give four independent
    uniform draws, so the mask costs a quarter of the generator calls. The drop probability is
    rounded to a multiple of 2^-16 (0.1 becomes 0.100006); the returned scale is the exact
    inverse keep rate, so expectations are preserved.

    The words come from NumPy's SFC64 generator, twice as fast as torch's Mersenne Twister,
    seeded with one draw from ``generator``: seeding torch still makes masks reproducible.

    The mask is ``uint8`` (1 = keep), not ``bool``: on the CPU, casting ``bool`` to float or
    multiplying a float tensor by a ``bool`` one is 10x slower than the same with ``uint8``.

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
    """``x * keep * scale`` that keeps only the ``uint8`` mask for backward (1 byte an element).

    A plain ``x * float_mask`` keeps the float mask: 4 bytes an element, for every dropout of
    every layer, most of a CPU training step's memory after the attention scores.
    """

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
