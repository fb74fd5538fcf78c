"""Fused CPU attention (``fused_attention.c``): scores, softmax, dropout and values in one pass.

Between the q/k/v projection and the output projection, plain torch runs a chain of operators
over ``[G, L, L]`` score tensors (``baddbmm``, softmax, the dropout mask and its product, a
batched product with only 10 output columns) and the backward's twin chain; on the CPU they
take most of an attention block's time, not for the arithmetic but for the passes over memory.
The C kernel does the whole thing per (head, graph) pair and per 8 queries, with the scores in
L1, and draws the dropout mask from a hash of each score's index instead of storing it. It is
about twice as fast in forward, and keeps only the probabilities (or, above
:data:`~graphormer_sepnorm.nn.attention_core.RECOMPUTE_ABOVE` scores, nothing) for backward
(``benchmarks/README.md`` has the figures).

Layouts: q, k and v are rows of ``qkv_t = W x^T + b`` ``[3 * D, B * L]``, the projection
computed transposed, its rows in ``nn.Linear``'s own order ``(s, h, j)`` (block, head, head
dim); the output is ``[D, B * L]`` with rows ``(h, j)``, so the output projection takes it as
it is; and the bias is **keys-first**: ``bias_t[g, key, query]`` for the pair
``g = h * B + b``. The kernel reads any row order through strides, so the weights are used
unpermuted (the torch path of :mod:`~graphormer_sepnorm.nn.head_major` needs head-minor rows).

:func:`usable` says when it runs: float32 on an AVX2 CPU, outside autocast, head size at most
16, a C compiler present (see :mod:`~graphormer_sepnorm.nn.native.build`).
"""

from __future__ import annotations

import ctypes
from functools import cache

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

from graphormer_sepnorm.nn.attention_core import RECOMPUTE_ABOVE
from graphormer_sepnorm.nn.drop_rate import drop_levels, keep_scale
from graphormer_sepnorm.nn.native import build
from graphormer_sepnorm.nn.native.threads import run_split

MAX_HEAD_DIM = 16
"""Larger heads would not fit the kernel's registers; they take the plain torch path."""

_P, _I, _F, _U32, _U64 = (ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_uint32,
                          ctypes.c_uint64)


@cache
def _kernels(head_dim: int) -> ctypes.CDLL | None:
    library = build.load("fused_attention", HEAD_DIM=head_dim)
    if library is not None:
        library.attention_forward.argtypes = [_P, _P, _P, _I, _I, _I, _I, _P, _P, _P, _I, _I,
                                              _I, _F, _U32, _F, _U64]
        library.attention_backward.argtypes = [_P, _P, _P, _I, _I, _I, _I, _P, _P, _P, _P, _I,
                                               _I, _I, _I, _P, _P, _P, _P, _I, _I, _I, _F,
                                               _U32, _F, _U64]
        library.attention_keep_mask.argtypes = [_P, _I, _I, _U32, _U64]
        library.attention_keep_mask.restype = None
    return library


def usable(x: Tensor, head_dim: int) -> bool:
    """Whether the fused kernel runs for tokens ``x`` and this head size (builds it once)."""
    return (x.device.type == "cpu" and x.dtype == torch.float32 and head_dim <= MAX_HEAD_DIM
            and not torch.is_autocast_enabled("cpu") and _kernels(head_dim) is not None)


def _blocks(qkv_t: Tensor) -> tuple[int, int, int]:
    """Addresses of the q, k and v blocks of ``[3 * D, B * L]`` (or of its gradient)."""
    block = qkv_t.numel() // 3 * qkv_t.element_size()
    return tuple(qkv_t.data_ptr() + s * block for s in range(3))  # type: ignore[return-value]


def _run(kernel: ctypes._CFuncPtr, pairs: int, length: int, *args: object) -> None:
    """``kernel(*args[:-5], g0, g1, *args[-5:])`` over all pairs, split over threads."""
    before, after = args[:-5], args[-5:]
    statuses = run_split(lambda g0, g1: kernel(*before, g0, g1, *after), pairs,
                         pairs * length * length)
    if any(statuses):
        raise MemoryError("fused attention: no memory for the kernel's scratch")


class _FusedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx: FunctionCtx, qkv_t: Tensor, bias_t: Tensor, num_heads: int, batch: int,
                scale: float, p: float, keep_probs: bool) -> Tensor:
        kernels = _kernels(qkv_t.shape[0] // (3 * num_heads))
        dim, tokens = qkv_t.shape[0] // 3, qkv_t.shape[1]
        length, pairs = tokens // batch, num_heads * batch
        head_dim = dim // num_heads
        # One draw from the global generator: seeding torch still makes runs reproducible.
        seed = int(torch.randint(0, 2**62, (1,))) if p > 0 else 0
        probs_t = torch.empty_like(bias_t) if keep_probs else None
        out_t = qkv_t.new_empty(dim, tokens)
        q, k, v = _blocks(qkv_t)
        # strides of head, graph, head-dim row and position: rows (h, j) of [3 * D, B * L]
        _run(kernels.attention_forward, pairs, length, q, k, v, batch, head_dim * tokens, length,
             tokens, bias_t.data_ptr(), None if probs_t is None else probs_t.data_ptr(),
             out_t.data_ptr(), length, scale, drop_levels(p), keep_scale(p), seed)
        ctx.meta = (num_heads, batch, scale, p, seed)  # type: ignore[attr-defined]
        ctx.save_for_backward(qkv_t, bias_t, probs_t, out_t)
        return out_t

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_out_t: Tensor) -> tuple[Tensor | None, ...]:
        num_heads, batch, scale, p, seed = ctx.meta  # type: ignore[attr-defined]
        qkv_t, bias_t, probs_t, out_t = ctx.saved_tensors
        kernels = _kernels(qkv_t.shape[0] // (3 * num_heads))
        tokens, head_dim = out_t.shape[1], out_t.shape[0] // num_heads
        length, pairs = tokens // batch, num_heads * batch
        grad_qkv_t, grad_bias_t = torch.empty_like(qkv_t), torch.empty_like(bias_t)
        if grad_out_t.stride(1) != 1 and grad_out_t.stride(0) != 1:
            grad_out_t = grad_out_t.contiguous()
        # [D, B * L] with rows (h, j): strides of head, graph, head-dim row and position
        rows, cols = grad_out_t.stride()
        grad_layout = (head_dim * rows, length * cols, rows, cols)
        q, k, v = _blocks(qkv_t)
        gq, gk, gv = _blocks(grad_qkv_t)
        _run(kernels.attention_backward, pairs, length, q, k, v, batch, head_dim * tokens,
             length, tokens, bias_t.data_ptr(),
             None if probs_t is None else probs_t.data_ptr(), out_t.data_ptr(),
             grad_out_t.data_ptr(), *grad_layout, grad_bias_t.data_ptr(), gq, gk, gv,
             length, scale, drop_levels(p), keep_scale(p), seed)
        return grad_qkv_t, grad_bias_t, None, None, None, None, None


def fused_attention(qkv_t: Tensor, bias_t: Tensor, num_heads: int, batch: int, scale: float,
                    p: float = 0.0, keep_probs: bool | None = None) -> Tensor:
    """``dropout(softmax(scale * q k^T + bias)) v`` for all heads and graphs, in one kernel.

    Args:
        qkv_t: ``[3 * D, B * L]`` float32, contiguous: the q, k and v projections transposed,
            rows ``(s, h, j)`` (``nn.Linear``'s order: block, head, head dim).
        bias_t: ``[H * B, L, L]`` float32, contiguous, keys-first: ``bias_t[h * B + b, j, i]``
            is added to query ``i``'s score for key ``j``. May require grad.
        num_heads: ``H``.
        batch: ``B``.
        scale: multiplies ``q k^T``, usually ``d ** -0.5``.
        p: dropout on the probabilities, in steps of 2^-16 like
            :func:`~graphormer_sepnorm.nn.dropout.keep_mask`. Default: 0.
        keep_probs: keep the probabilities for backward (4 bytes a score) instead of
            recomputing them. Default: up to ``RECOMPUTE_ABOVE`` scores.

    Returns:
        ``[D, B * L]``: the attention output, rows ``(h, j)``, ready for the output
        projection (``out.weight @ result``).
    """
    if not usable(qkv_t, qkv_t.shape[0] // (3 * num_heads)):
        raise RuntimeError("the fused attention kernel is not usable here; see usable()")
    if qkv_t.shape[1] * num_heads * qkv_t.shape[1] // batch >= 2**32:
        raise ValueError("more than 2^32 scores: the dropout counter would wrap")
    if not (qkv_t.is_contiguous() and bias_t.is_contiguous()):
        raise ValueError("qkv_t and bias_t must be contiguous")
    if keep_probs is None:
        keep_probs = bias_t.numel() <= RECOMPUTE_ABOVE
    # Function.forward runs without grad mode: whether backward will come is decided here
    keep_probs = keep_probs and torch.is_grad_enabled() and (qkv_t.requires_grad
                                                             or bias_t.requires_grad)
    return _FusedAttention.apply(qkv_t, bias_t, num_heads, batch, scale, p, keep_probs)


def keep_mask_t(pairs: int, length: int, p: float, seed: int) -> Tensor:
    """The kernel's dropout keep mask (1.0 kept), ``[pairs, L, L]`` keys-first, for ``seed``.

    What :func:`fused_attention` draws with that seed; for tests and reference computations.
    """
    kernels = _kernels(10)  # the mask does not depend on the head size
    if kernels is None:
        raise RuntimeError("the fused attention kernel is not usable here")
    keep = torch.empty(pairs, length, length)
    kernels.attention_keep_mask(keep.data_ptr(), pairs, length, drop_levels(p), seed)
    return keep
