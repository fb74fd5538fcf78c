"""Attention through SDPA's fused CUDA kernel, on heads zero-padded to its alignment.

Graphormer-slim's heads have 10 dimensions. SDPA's memory-efficient CUDA kernel, the fused one
that takes an additive bias and returns its gradient, needs 16-byte aligned heads, so at head
size 10 SDPA falls back to its unfused math: several kernels, and the ``[B, H, L, L]`` scores
and probabilities written out, forward and backward. Zero-padded heads change no score and no
output. The padding is written with the q/k/v projection's bias (one kernel that a compiled
step has anyway: the efficient kernel reads a materialized input); padding the projection
weights instead cost two more small kernels per layer, forward and backward.
:class:`~graphormer_sepnorm.nn.attention.BiasedMultiheadAttention` takes this path wherever
:func:`fused_head_dim` gives a size, under ``vmap`` too (the kernel's batching rule folds the
replicas into its batch). :func:`sdpa` calls that kernel itself on CUDA
(:func:`efficient_attention` says why).
"""

from __future__ import annotations

import os
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

#: How attention runs on CUDA: ``efficient`` (the default; :func:`efficient_attention`) or
#: ``math`` (SDPA's unfused math only: slower, more memory, but proven on every path), from
#: ``GRAPHORMER_SEPNORM_CUDA_ATTENTION`` when the package is imported. A lease's fallback
#: should the efficient kernel fail on a GPU (it was fixed blind, 2026-11-27).
CUDA_ATTENTION = os.environ.get("GRAPHORMER_SEPNORM_CUDA_ATTENTION", "efficient")
if CUDA_ATTENTION not in ("efficient", "math"):
    raise ValueError(f"GRAPHORMER_SEPNORM_CUDA_ATTENTION={CUDA_ATTENTION!r}: "
                     "'efficient' or 'math'")
#: SDPA's kernels allowed on CUDA where :func:`uses_efficient_kernel` says no (float64, say):
#: the two that differentiate an additive bias (the math one only under ``math``).
CUDA_BACKENDS = [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH] \
    if CUDA_ATTENTION == "efficient" else [SDPBackend.MATH]
#: The memory-efficient kernel, called by :func:`efficient_attention` (a name tests can replace).
EFFICIENT_KERNEL = torch.ops.aten._scaled_dot_product_efficient_attention
#: The bias's row alignment, in elements, that SDPA itself pads the bias to for that kernel.
BIAS_ALIGNMENT = 16


def fused_head_dim(head_dim: int, device: torch.device) -> int | None:
    """The head size SDPA's fused kernel gets: on CUDA the next multiple of 8, else ``None``."""
    return -(-head_dim // 8) * 8 if device.type == "cuda" else None


def sdpa(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, dropout_p: float,
         scale: float) -> Tensor:
    """Attention of ``q`` ``[B, H, Lq, E]`` over ``k``, ``v`` ``[B, H, L, E]`` plus ``bias``.

    On CUDA, through :func:`efficient_attention` where it applies; otherwise
    ``F.scaled_dot_product_attention``, on CUDA among :data:`CUDA_BACKENDS` only (torch 2.11
    picked cuDNN's kernel for packed replicas in bf16, whose backward has no gradient for the
    bias: ``'_scaled_dot_product_cudnn_attention' is not differentiable with respect to
    argument 'attn_bias'``, an H200, 2026-11-27). Elsewhere, SDPA's own choice.
    """
    if uses_efficient_kernel(q):
        return efficient_attention(q, k, v, bias, dropout_p, scale)
    with sdpa_kernel(CUDA_BACKENDS) if restricts_backends(q) else nullcontext():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p,
                                              scale=scale)


def restricts_backends(q: Tensor) -> bool:
    """Whether :func:`sdpa` keeps SDPA to :data:`CUDA_BACKENDS` for ``q``: on CUDA."""
    return q.is_cuda


def uses_efficient_kernel(q: Tensor) -> bool:
    """Whether :func:`sdpa` calls the kernel itself: CUDA, 16-bit or float32, ``E % 8 == 0``.

    Never when :data:`CUDA_ATTENTION` is ``math``.
    """
    return (CUDA_ATTENTION == "efficient" and q.is_cuda
            and q.dtype in (torch.float16, torch.bfloat16, torch.float32)
            and q.shape[-1] % 8 == 0)


def efficient_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, dropout_p: float,
                        scale: float) -> Tensor:
    """SDPA's memory-efficient kernel, asked for the backward's statistics whenever grad is on.

    SDPA asks the kernel for its log-sum-exp (what the backward needs) only when ``q``, ``k``
    or ``v`` requires grad, and under ``vmap`` (packed replicas) none reports that it does.
    Without it the backward failed (``LSE is not correctly aligned (strideH)``, an H200,
    2026-11-27), and the trained bias alone would not have been reason enough. The bias's rows
    are padded to :data:`BIAS_ALIGNMENT` as SDPA pads them for this kernel.
    """
    length = bias.shape[-1]
    if length % BIAS_ALIGNMENT:
        bias = F.pad(bias, (0, -length % BIAS_ALIGNMENT))[..., :length]
    out, *_ = EFFICIENT_KERNEL(q, k, v, bias, torch.is_grad_enabled(), dropout_p, False,
                               scale=scale)
    return out


def padded(qkv: Tensor, num_heads: int, bias: Tensor, queries: int, width: int,
           dropout_p: float) -> Tensor:
    """Attention on ``qkv`` ``[B, L, 3 * D]`` through SDPA on heads padded to ``width``.

    ``bias`` ``[B, H, L, L]`` (its first ``queries`` rows are read); returns the first
    ``queries`` positions' heads merged, ``[B * queries, D]``, before the output projection.
    The caller's projection takes token rows ``[B * L, D]``: under vmap a ``[B, L, D]`` input
    whose replica dimension was not the leading one made matmul copy the weight for every
    molecule (``[R, B, D, 3D]``) and sum a weight gradient per molecule in the backward.
    """
    b, length, three_dim = qkv.shape
    dim = three_dim // 3
    head_dim = dim // num_heads
    qkv = qkv.view(b, length, 3, num_heads, head_dim)
    q, k, v = F.pad(qkv, (0, width - head_dim)).permute(2, 0, 3, 1, 4)  # [B, H, L, width]
    out = sdpa(q[:, :, :queries], k, v, bias[:, :, :queries].to(q.dtype), dropout_p,
               head_dim**-0.5)
    return out[..., :head_dim].transpose(1, 2).reshape(b * queries, dim)
