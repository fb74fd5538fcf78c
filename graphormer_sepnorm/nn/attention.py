"""Multi-head self-attention with an additive per-head bias."""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn

from graphormer_sepnorm.nn.dropout import dropout

FastAttend = Callable[[Tensor, Tensor, int, int, float], "Tensor | None"]
"""A device wing's :func:`attend` (same arguments, no ``explicit``), or ``None`` to decline."""


class BiasedMultiheadAttention(nn.Module):
    """Self-attention whose scores get an additive bias before the softmax.

    ``softmax(q k^T / sqrt(d) + bias) v`` per head, then the output projection; the bias
    ``[B, H, L, L]`` holds ``-inf`` on padded keys. Computed by SDPA when :attr:`fused` (the
    default), explicitly otherwise and always with ``need_weights``; a device wing's
    ``fast_attend`` (set by :func:`~graphormer_sepnorm.nn.backends.set_backend`) may take over.

    Args:
        dim: model size ``D``.
        num_heads: ``H``; must divide ``D``.
        dropout: dropout on the attention probabilities. Default: 0.0.

    Shapes:
        ``x`` ``[B, L, D]``, ``bias`` ``[B, H, L, L]`` -> ``[B, Lq, D]`` and, with
        ``need_weights``, the probabilities ``[B, H, Lq, L]`` (``Lq = L`` unless
        ``num_queries``).

    Examples:
        >>> import torch
        >>> attention = BiasedMultiheadAttention(dim=16, num_heads=4)
        >>> x, bias = torch.randn(2, 5, 16), torch.zeros(2, 4, 5, 5)
        >>> out, weights = attention(x, bias, need_weights=True)
        >>> out.shape, weights.shape
        (torch.Size([2, 5, 16]), torch.Size([2, 4, 5, 5]))
    """

    def __init__(self, dim: int, num_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"hidden size {dim} is not divisible by {num_heads} heads")
        self.num_heads = num_heads
        self.dropout = dropout
        self.fused = True
        self.fast_attend: FastAttend | None = None
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: Tensor, bias: Tensor, need_weights: bool = False,
                num_queries: int | None = None) -> tuple[Tensor, Tensor | None]:
        """Attends; with ``num_queries`` only the first positions (and rows of ``bias``)."""
        b, length, dim = x.shape
        queries = length if num_queries is None else num_queries
        # token rows [B * L, D]: under vmap a [B, L, D] input whose replica dimension is not
        # the leading one made matmul copy the weight for every molecule
        qkv = self.qkv(x.reshape(-1, dim)).view(b, length, 3 * dim)
        dropout_p = self.dropout if self.training else 0.0
        rows = None
        if self.fast_attend is not None and not need_weights:
            rows = self.fast_attend(qkv, bias, self.num_heads, queries, dropout_p)
        weights = None
        if rows is None:
            rows, weights = attend(qkv, bias, self.num_heads, queries, dropout_p,
                                   explicit=need_weights or not self.fused)
        return self.out(rows).view(b, queries, dim), weights if need_weights else None


def attend(qkv: Tensor, bias: Tensor, num_heads: int, queries: int, dropout_p: float,
           explicit: bool = False) -> tuple[Tensor, Tensor | None]:
    """Biased attention of the first ``queries`` positions of projected ``qkv`` ``[B, L, 3D]``.

    Returns their heads merged, ``[B * queries, D]``, before the output projection, and with
    ``explicit`` the probabilities ``[B, H, queries, L]`` (else SDPA computes, ``None``).
    """
    b, length, three_dim = qkv.shape
    dim = three_dim // 3
    head_dim = dim // num_heads
    q, k, v = qkv.view(b, length, 3, num_heads, head_dim).permute(2, 0, 3, 1, 4)
    q, bias = q[:, :, :queries], bias[:, :, :queries].to(q.dtype)
    weights = None
    if explicit:
        scores = (q @ k.transpose(-1, -2)) * head_dim**-0.5 + bias
        weights = scores.softmax(-1)
        out = dropout(weights, dropout_p, dropout_p > 0) @ v
    else:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p,
                                             scale=head_dim**-0.5)
    return out.transpose(1, 2).reshape(-1, dim), weights
