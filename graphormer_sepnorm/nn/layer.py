"""One pre-LN Graphormer layer with pluggable norms."""

from __future__ import annotations

from torch import Tensor, nn

from graphormer_sepnorm.nn.attention import BiasedMultiheadAttention
from graphormer_sepnorm.nn.dropout import Dropout


class GraphormerLayer(nn.Module):
    """``x + Attn(norm_attn(x))`` then ``x + FFN(norm_ffn(x))`` (pre-LN, as Graphormer v1).

    The norms (a :class:`~graphormer_sepnorm.nn.sepnorm.SepNorm` or
    :class:`~graphormer_sepnorm.nn.sepnorm.ShareNorm`) take ``(x, node_mask)``; dropout applies
    to each block's output before the residual sum.

    Args:
        dim: model size ``D``.
        ffn_dim: hidden size of the feed-forward block.
        num_heads: attention heads ``H``.
        attn_norm: norm before attention.
        ffn_norm: norm before the feed-forward block.
        dropout: dropout on each block's output. Default: 0.1.
        attention_dropout: dropout on attention probabilities. Default: 0.1.
        activation_dropout: dropout after the GELU. Default: 0.1.

    Shapes:
        ``x`` ``[B, 1 + N, D]``, ``bias`` ``[B, H, 1 + N, 1 + N]``, ``node_mask`` ``[B, N]``
        -> ``[B, 1 + N, D]`` (``[B, 1, D]`` with ``graph_token_only``).

    Examples:
        >>> import torch
        >>> from graphormer_sepnorm.nn.sepnorm import SepNorm
        >>> layer = GraphormerLayer(16, 32, 4, SepNorm(16), SepNorm(16))
        >>> x, mask = torch.randn(2, 5, 16), torch.ones(2, 4, dtype=torch.bool)
        >>> layer(x, torch.zeros(2, 4, 5, 5), mask)[0].shape
        torch.Size([2, 5, 16])
    """

    def __init__(self, dim: int, ffn_dim: int, num_heads: int, attn_norm: nn.Module,
                 ffn_norm: nn.Module, dropout: float = 0.1, attention_dropout: float = 0.1,
                 activation_dropout: float = 0.1) -> None:
        super().__init__()
        self.attn_norm = attn_norm
        self.attention = BiasedMultiheadAttention(dim, num_heads, attention_dropout)
        self.ffn_norm = ffn_norm
        self.ffn = nn.Sequential(
            nn.Linear(dim, ffn_dim), nn.GELU(), Dropout(activation_dropout),
            nn.Linear(ffn_dim, dim),
        )
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor, bias: Tensor, node_mask: Tensor, need_weights: bool = False,
                graph_token_only: bool = False) -> tuple[Tensor, Tensor | None]:
        """Returns the updated ``x`` and, with ``need_weights``, the attention probabilities.

        With ``graph_token_only`` only position 0 is updated and returned (``[B, 1, D]``).
        """
        num_queries = 1 if graph_token_only else None
        attended, weights = self.attention(self.attn_norm(x, node_mask), bias, need_weights,
                                           num_queries)
        if graph_token_only:
            x, node_mask = x[:, :1], node_mask[:, :0]
        x = x + self.dropout(attended)
        x = x + self.dropout(self.ffn(self.ffn_norm(x, node_mask).flatten(0, -2)).view_as(x))
        return x, weights
