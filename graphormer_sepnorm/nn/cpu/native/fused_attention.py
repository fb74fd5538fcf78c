"""Fused CPU attention (``fused_attention.c``): scores, softmax, dropout and values in one pass.

Per (head, graph) pair and per 8 queries, with the scores in L1; the dropout mask is a hash of
each score's index, carried to backward in the kept probabilities' sign bits (above
:data:`RECOMPUTE_ABOVE` scores nothing is kept). Measured 1.9-2.6x faster than the torch path
in inference and 1.2-2.2x in training (``docs/results/cpu_training_speed.md``). All size groups
of a batch go through one call and one autograd node, each with its own dropout seed
(:func:`group_seed`).

Layouts: q, k and v are rows of ``qkv_t = W x^T + b`` ``[3 * D, T]`` in ``nn.Linear``'s row
order ``(s, h, j)`` (block, head, head dim), read through strides; the output is ``[D, T]``,
rows ``(h, j)``, as the output projection takes it; the bias is keys-first,
``bias_t[h * B + b, key, query]``. :func:`usable` says when it runs: float32 on an AVX2 CPU,
outside autocast, head size at most :data:`MAX_HEAD_DIM`, a C compiler present.
"""

from __future__ import annotations

import ctypes
from functools import cache

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

from graphormer_sepnorm.nn.cpu.native import build, drop_levels, keep_scale
from graphormer_sepnorm.nn.cpu.native.build import run_split

RECOMPUTE_ABOVE = 1 << 22
"""Score tensors with more elements than this are recomputed in backward instead of kept."""

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


def group_seed(seed: int, group: int) -> int:
    """The dropout seed of group ``group`` of a call drawn ``seed`` (splitmix64 of both).

    Each group's mask counts its scores from 0, so groups need unrelated seeds.
    """
    z = (seed + (group + 1) * 0x9E3779B97F4A7C15) % 2**64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 % 2**64
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB % 2**64
    return z ^ (z >> 31)


class _Groups:
    """Where each group's graphs lie in ``[*, T]`` token columns: ``(graphs, L, first column)``."""

    def __init__(self, counts: list[int], lengths: list[int]) -> None:
        self.spans, start = [], 0
        for count, length in zip(counts, lengths, strict=True):
            self.spans.append((count, length, start))
            start += count * length
        self.tokens = start

    def layouts(self, head_dim: int, itemsize: int) -> list[tuple[int, int, int, tuple[int, ...]]]:
        """Per group: ``L``, first column, byte offset in a row, and the kernels' strides.

        The strides are ``(B_g, head, graph, head-dim row)`` of q, k, v and the output, whose
        positions are consecutive.
        """
        return [(length, first, first * itemsize,
                 (count, head_dim * self.tokens, length, self.tokens))
                for count, length, first in self.spans]


class _FusedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx: FunctionCtx, qkv_t: Tensor, groups: _Groups, num_heads: int, scale: float,
                p: float, keep_probs: list[bool], *biases: Tensor) -> Tensor:
        head_dim = qkv_t.shape[0] // (3 * num_heads)
        kernels = _kernels(head_dim)
        seeds = [0] * len(biases)
        if p > 0:  # one draw from the global generator: seeding torch keeps runs reproducible
            seed = int(torch.randint(0, 2**62, (1,)))
            seeds = [group_seed(seed, k) for k in range(len(biases))]
        probs = [torch.empty_like(b) if keep else None for b, keep in zip(biases, keep_probs,
                                                                           strict=True)]
        out_t = qkv_t.new_empty(qkv_t.shape[0] // 3, qkv_t.shape[1])
        q, k, v = _blocks(qkv_t)
        for (length, _, at, strides), bias_t, probs_t, group_seed_ in zip(
                groups.layouts(head_dim, qkv_t.element_size()), biases, probs, seeds,
                strict=True):
            _run(kernels.attention_forward, num_heads * strides[0], length, q + at, k + at,
                 v + at, *strides, bias_t.data_ptr(),
                 None if probs_t is None else probs_t.data_ptr(), out_t.data_ptr() + at,
                 length, scale, drop_levels(p), keep_scale(p), group_seed_)
        ctx.meta = (groups, num_heads, scale, p, seeds)  # type: ignore[attr-defined]
        ctx.save_for_backward(qkv_t, out_t, *biases, *probs)
        return out_t

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_out_t: Tensor) -> tuple[Tensor | None, ...]:
        groups, num_heads, scale, p, seeds = ctx.meta  # type: ignore[attr-defined]
        qkv_t, out_t, *saved = ctx.saved_tensors
        biases, probs = saved[:len(seeds)], saved[len(seeds):]
        head_dim = out_t.shape[0] // num_heads
        kernels = _kernels(head_dim)
        grad_qkv_t = torch.empty_like(qkv_t)
        grad_biases = [torch.empty_like(b) for b in biases]
        if grad_out_t.stride(1) != 1 and grad_out_t.stride(0) != 1:
            grad_out_t = grad_out_t.contiguous()
        rows, cols = grad_out_t.stride()  # [D, T], rows (h, j)
        q, k, v = _blocks(qkv_t)
        gq, gk, gv = _blocks(grad_qkv_t)
        itemsize = out_t.element_size()
        for (length, first, at, strides), bias_t, probs_t, grad_bias_t, group_seed_ in zip(
                groups.layouts(head_dim, itemsize), biases, probs, grad_biases, seeds,
                strict=True):
            grad_at = first * cols * itemsize
            _run(kernels.attention_backward, num_heads * strides[0], length, q + at, k + at,
                 v + at, *strides, bias_t.data_ptr(),
                 None if probs_t is None else probs_t.data_ptr(), out_t.data_ptr() + at,
                 grad_out_t.data_ptr() + grad_at, head_dim * rows, length * cols, rows, cols,
                 grad_bias_t.data_ptr(), gq + at, gk + at, gv + at, length, scale,
                 drop_levels(p), keep_scale(p), group_seed_)
        return grad_qkv_t, None, None, None, None, None, *grad_biases


def fused_attention(qkv_t: Tensor, bias_t: Tensor | list[Tensor], num_heads: int,
                    batch: int | list[int], scale: float, p: float = 0.0,
                    keep_probs: bool | None = None, lengths: list[int] | None = None) -> Tensor:
    """``dropout(softmax(scale * q k^T + bias)) v`` for all heads and graphs, in one kernel.

    Args:
        qkv_t: ``[3 * D, T]`` float32, contiguous: the q, k and v projections transposed,
            rows ``(s, h, j)``; ``T = B * L``, or with size groups the sum of ``B_g * L_g``,
            each group's graphs after the previous group's.
        bias_t: ``[H * B, L, L]`` float32, contiguous, keys-first: ``bias_t[h * B + b, j, i]``
            is added to query ``i``'s score for key ``j``. May require grad. With groups, one
            ``[H * B_g, L_g, L_g]`` per group.
        num_heads: ``H``.
        batch: ``B``, or each group's ``B_g``.
        scale: multiplies ``q k^T``, usually ``d ** -0.5``.
        p: dropout on the probabilities, in steps of 2^-16. Default: 0.
        keep_probs: keep the probabilities for backward (4 bytes a score) instead of
            recomputing them. Default: for each group up to ``RECOMPUTE_ABOVE`` scores.
        lengths: each group's ``L_g`` (with groups). Default: ``T // B``.

    Returns:
        ``[D, T]``: the attention output, rows ``(h, j)``, ready for the output
        projection (``out.weight @ result``).
    """
    biases = [bias_t] if isinstance(bias_t, Tensor) else list(bias_t)
    counts = [batch] if isinstance(batch, int) else list(batch)
    lengths = [qkv_t.shape[1] // counts[0]] if lengths is None else list(lengths)
    groups = _Groups(counts, lengths)
    if not usable(qkv_t, qkv_t.shape[0] // (3 * num_heads)):
        raise RuntimeError("the fused attention kernel is not usable here; see usable()")
    if groups.tokens != qkv_t.shape[1] or len(biases) != len(counts):
        raise ValueError("groups do not match qkv_t's columns or the biases")
    if any(b.numel() >= 2**32 for b in biases):  # the counter of a group's scores
        raise ValueError("more than 2^32 scores: the dropout counter would wrap")
    if not (qkv_t.is_contiguous() and all(b.is_contiguous() for b in biases)):
        raise ValueError("qkv_t and bias_t must be contiguous")
    # Function.forward runs without grad mode: whether backward will come is decided here
    backward = torch.is_grad_enabled() and (qkv_t.requires_grad
                                            or any(b.requires_grad for b in biases))
    keep = [backward and (b.numel() <= RECOMPUTE_ABOVE if keep_probs is None else keep_probs)
            for b in biases]
    return _FusedAttention.apply(qkv_t, groups, num_heads, scale, p, keep, *biases)


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
