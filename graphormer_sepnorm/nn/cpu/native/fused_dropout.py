"""Dropout, or dropout added to a residual, in one pass (``dropout.c``).

The torch path with a stored ``uint8`` mask takes five passes in forward (draw, compare, cast,
scale, multiply) and three in backward, plus one for the residual sum; here each direction is
one pass and the mask, a hash of each element's index and a seed, is drawn again in backward
(98 us for 184k elements with a residual: ``docs/results/cpu_training_speed.md``).
:func:`usable` says when it runs: float32 on an AVX2 CPU, outside autocast, fewer than 2^32
elements, a C compiler present.
"""

from __future__ import annotations

import ctypes
from functools import cache

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

from graphormer_sepnorm.nn.cpu.native import build, drop_levels, keep_scale
from graphormer_sepnorm.nn.cpu.native.build import run_split

_P, _I, _F, _U32, _U64 = (ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_uint32,
                          ctypes.c_uint64)


@cache
def _kernels() -> ctypes.CDLL | None:
    library = build.load("dropout")
    if library is not None:
        library.dropout_forward.argtypes = [_P, _P, _P, _I, _I, _U32, _F, _U64]
        library.dropout_forward.restype = None
        library.dropout_backward.argtypes = [_P, _P, _I, _I, _U32, _F, _U64]
        library.dropout_backward.restype = None
    return library


def usable(x: Tensor) -> bool:
    """Whether the fused dropout runs for ``x`` (builds the kernel once)."""
    return (x.device.type == "cpu" and x.dtype == torch.float32 and x.numel() < 2**32
            and not torch.is_autocast_enabled("cpu") and _kernels() is not None)


def takes(x: Tensor, residual: Tensor | None = None) -> bool:
    """Whether :func:`fused_dropout` runs on these operands.

    :func:`usable` for ``x``, both contiguous, ``residual`` (if any) of ``x``'s shape and dtype.
    """
    return usable(x) and x.is_contiguous() and (residual is None or (
        residual.shape == x.shape and residual.dtype == x.dtype and residual.is_contiguous()))


def _masked(x: Tensor, residual: Tensor | None, p: float, seed: int) -> Tensor:
    """``residual + x * keep * scale`` (no residual: ``x * keep * scale``), one pass."""
    out = torch.empty_like(x)
    forward = _kernels().dropout_forward
    x_ptr, out_ptr = x.data_ptr(), out.data_ptr()
    residual_ptr = None if residual is None else residual.data_ptr()
    levels, scale = drop_levels(p), keep_scale(p)
    run_split(lambda begin, end: forward(x_ptr, residual_ptr, out_ptr, begin, end, levels,
                                         scale, seed), x.numel(), x.numel(), align=16)
    return out


class _FusedDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx: FunctionCtx, x: Tensor, residual: Tensor | None, p: float) -> Tensor:
        # One draw from the global generator: seeding torch still makes runs reproducible.
        seed = int(torch.randint(0, 2**62, (1,)))
        ctx.p, ctx.seed = p, seed  # type: ignore[attr-defined]
        return _masked(x, residual, p, seed)

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad: Tensor) -> tuple[Tensor | None, ...]:
        grad_x = _masked(grad.contiguous(), None, ctx.p, ctx.seed)  # type: ignore[attr-defined]
        return grad_x, grad if ctx.needs_input_grad[1] else None, None


def fused_dropout(x: Tensor, p: float, residual: Tensor | None = None) -> Tensor:
    """Inverted dropout of ``x`` in one pass, added to ``residual`` when given.

    Args:
        x: float32, contiguous.
        p: drop probability, ``0 < p < 1``.
        residual: same shape, float32, contiguous; may require grad. Default: none.

    Returns:
        ``residual + x * keep / (1 - p)`` (without ``residual``: ``x * keep / (1 - p)``).
    """
    if not usable(x):
        raise RuntimeError("the fused dropout kernel is not usable here; see usable()")
    if not 0.0 < p < 1.0:
        raise ValueError(f"drop probability must be in (0, 1), got {p}")
    if not takes(x, residual):
        raise ValueError("x and residual must be contiguous float32 tensors of one shape")
    return _FusedDropout.apply(x, residual, p)


def keep_mask_flat(numel: int, p: float, seed: int) -> Tensor:
    """The kernel's keep mask (1.0 kept) of ``numel`` elements for ``seed``: for tests."""
    ones = torch.ones(numel)
    return _masked(ones, None, p, seed).mul_(1.0 / keep_scale(p)).round_()
