"""Multi-head self-attention with an additive per-head bias."""

from __future__ import annotations

from torch import Tensor, nn

from graphormer_sepnorm.nn import fused_attention
from graphormer_sepnorm.nn.dropout import dropout


class BiasedMultiheadAttention(nn.Module):
    """Self-attention whose scores get an additive bias before the softmax.

    ``softmax(q k^T / sqrt(d) + bias) v`` per head, then the output projection. The bias
    ``[B, H, L, L]`` carries Graphormer's structure (spatial, edge and graph-token terms) and
    ``-inf`` on padded keys. With ``need_weights`` it is computed explicitly, to return the
    probabilities (e.g. to plot the graph token's attention); on CUDA by SDPA's fused kernel on
    zero-padded heads (:mod:`~.fused_attention`); else by SDPA when :attr:`fused` (the bias
    is differentiable), explicitly when not (packed on the CPU: SDPA has no bias grad there).

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
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: Tensor, bias: Tensor, need_weights: bool = False,
                num_queries: int | None = None) -> tuple[Tensor, Tensor | None]:
        """Attends; see the class docstring for shapes.

        With ``num_queries`` only the first positions attend (keys and values are still all of
        ``x``): the last layer needs only the graph token when the model just predicts. Only
        those rows of ``bias`` are read, so it may be ``[B, H, num_queries, L]``.
        """
        b, length, dim = x.shape
        queries = length if num_queries is None else num_queries
        # token rows [B * L, D]: see fused_attention.padded
        qkv = self.qkv(x.reshape(-1, dim)).view(b, length, 3 * dim)
        rows, weights = self.attend(qkv, bias, need_weights, queries)
        return self.out(rows).view(b, queries, dim), weights

    def attend(self, qkv: Tensor, bias: Tensor, need_weights: bool = False,
               queries: int | None = None) -> tuple[Tensor, Tensor | None]:
        """Attention of the first ``queries`` (default all) of projected ``qkv`` ``[B, L, 3D]``.

        Returns their heads merged, ``[B * Lq, D]``, before the output projection (and with
        ``need_weights`` the probabilities). :mod:`~.token_rows` gathers ``qkv`` to call it.
        """
        b, length, three_dim = qkv.shape
        dim, queries = three_dim // 3, length if queries is None else queries
        head_dim = dim // self.num_heads
        dropout_p = self.dropout if self.training else 0.0
        width = fused_attention.fused_head_dim(head_dim, qkv.device)
        if width is not None and not need_weights:
            return fused_attention.padded(qkv, self.num_heads, bias, queries, width,
                                          dropout_p), None
        q, k, v = qkv.view(b, length, 3, self.num_heads, head_dim).permute(2, 0, 3, 1, 4)
        q, bias = q[:, :, :queries], bias[:, :, :queries].to(q.dtype)
        weights = None
        if need_weights or not self.fused:
            scores = (q @ k.transpose(-1, -2)) * head_dim**-0.5 + bias
            weights = scores.softmax(-1)
            out = dropout(weights, dropout_p, dropout_p > 0) @ v
            weights = weights if need_weights else None
        else:
            out = fused_attention.sdpa(q, k, v, bias, dropout_p, head_dim**-0.5)
        return out.transpose(1, 2).reshape(-1, dim), weights
