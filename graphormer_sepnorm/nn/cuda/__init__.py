"""The CUDA wing: attention through SDPA's memory-efficient kernel, heads zero-padded for it.

Plugged into :class:`~graphormer_sepnorm.nn.attention.BiasedMultiheadAttention` by
:func:`~graphormer_sepnorm.nn.backends.set_backend`: :func:`attend_if_applicable` is the
``'auto'`` backend, :func:`attend_or_raise` the ``'cuda'`` one. At head size 10 SDPA has no fused
kernel that takes an additive bias (it would write the ``[B, H, L, L]`` scores out, forward and
backward); the memory-efficient kernel needs heads aligned to 8, and zero-padded heads change
no score and no output. Under ``vmap`` (packed replicas) its batching rule folds the replicas
into its batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

__all__ = ["attend_if_applicable", "attend_or_raise", "padded_attention"]

#: SDPA's kernels allowed where :func:`efficient_attention` does not apply (float64): the two
#: that differentiate an additive bias. cuDNN's attention, which SDPA picks for packed replicas
#: in bf16, has no gradient for the bias.
SDPA_BACKENDS = [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
#: The memory-efficient kernel, called by :func:`efficient_attention` (a name tests replace).
EFFICIENT_KERNEL = torch.ops.aten._scaled_dot_product_efficient_attention
#: The bias's row alignment, in elements, that SDPA itself pads the bias to for that kernel.
BIAS_ALIGNMENT = 16
#: Head sizes are padded to a multiple of this.
HEAD_ALIGNMENT = 8


def padded_attention(qkv: Tensor, bias: Tensor, num_heads: int, queries: int,
                     dropout_p: float) -> Tensor:
    """Biased attention of the first ``queries`` positions, on heads padded for SDPA.

    Args:
        qkv: ``[B, L, 3 * D]``, the q/k/v projection of the tokens.
        bias: ``[B, H, L, L]`` (only its first ``queries`` rows are read).
        num_heads: ``H``.
        queries: ``Lq``, how many positions attend.
        dropout_p: dropout on the probabilities.

    Returns:
        Heads merged, ``[B * Lq, D]``, before the output projection.
    """
    b, length, three_dim = qkv.shape
    dim = three_dim // 3
    head_dim = dim // num_heads
    width = -(-head_dim // HEAD_ALIGNMENT) * HEAD_ALIGNMENT
    qkv = qkv.view(b, length, 3, num_heads, head_dim)
    q, k, v = F.pad(qkv, (0, width - head_dim)).permute(2, 0, 3, 1, 4)  # [B, H, L, width]
    out = sdpa(q[:, :, :queries], k, v, bias[:, :, :queries].to(q.dtype), dropout_p,
               head_dim**-0.5)
    return out[..., :head_dim].transpose(1, 2).reshape(b * queries, dim)


def sdpa(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, dropout_p: float,
         scale: float) -> Tensor:
    """Attention of ``q`` ``[B, H, Lq, E]`` over ``k``, ``v`` ``[B, H, L, E]`` plus ``bias``.

    Through :func:`efficient_attention` where :func:`uses_efficient_kernel`; otherwise
    ``F.scaled_dot_product_attention`` among :data:`SDPA_BACKENDS`.
    """
    if uses_efficient_kernel(q):
        return efficient_attention(q, k, v, bias, dropout_p, scale)
    with sdpa_kernel(SDPA_BACKENDS):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p,
                                              scale=scale)


def uses_efficient_kernel(q: Tensor) -> bool:
    """Whether :func:`sdpa` calls the kernel itself: float32 or 16-bit, ``E % 8 == 0``."""
    return q.dtype in (torch.float16, torch.bfloat16, torch.float32) and q.shape[-1] % 8 == 0


def efficient_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, dropout_p: float,
                        scale: float) -> Tensor:
    """SDPA's memory-efficient kernel, asked for the backward's statistics whenever grad is on.

    SDPA asks the kernel for its log-sum-exp (what the backward needs) only when ``q``, ``k``
    or ``v`` requires grad, and under ``vmap`` none reports that it does: the backward then
    fails (``LSE is not correctly aligned``). The bias's rows are padded to
    :data:`BIAS_ALIGNMENT` as SDPA pads them for this kernel.
    """
    length = bias.shape[-1]
    if length % BIAS_ALIGNMENT:
        bias = F.pad(bias, (0, -length % BIAS_ALIGNMENT))[..., :length]
    out, *_ = EFFICIENT_KERNEL(q, k, v, bias, torch.is_grad_enabled(), dropout_p, False,
                               scale=scale)
    return out


def attend_if_applicable(qkv: Tensor, bias: Tensor, num_heads: int, queries: int,
                         dropout_p: float) -> Tensor | None:
    """:func:`padded_attention` on CUDA tensors, else ``None`` (the reference's)."""
    if not qkv.is_cuda:
        return None
    return padded_attention(qkv, bias, num_heads, queries, dropout_p)


def attend_or_raise(qkv: Tensor, bias: Tensor, num_heads: int, queries: int,
                    dropout_p: float) -> Tensor:
    """:func:`padded_attention`; raises ``ValueError`` on tensors not on CUDA."""
    if not qkv.is_cuda:
        raise ValueError("backend 'cuda' runs on CUDA tensors only; use backend 'auto' or "
                         "'reference'")
    return padded_attention(qkv, bias, num_heads, queries, dropout_p)
