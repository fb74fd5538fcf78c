"""One pre-LN Graphormer layer with pluggable norms."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from graphormer_sepnorm.nn.attention import BiasedMultiheadAttention
from graphormer_sepnorm.nn.dropout import Dropout
from graphormer_sepnorm.nn.size_groups import SizeGroups


class GraphormerLayer(nn.Module):
    """``x + Attn(norm_attn(x))`` then ``x + FFN(norm_ffn(x))`` (pre-LN, as Graphormer v1).

    The norms are built by the caller (a :class:`~graphormer_sepnorm.nn.sepnorm.SepNorm` or
    :class:`~graphormer_sepnorm.nn.sepnorm.ShareNorm`); both take ``(x, node_mask)``.

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
        ``x`` ``[B, 1 + N, D]``, ``bias`` ``[B, H, 1 + N, 1 + N]``, ``node_mask`` ``[B, N]``.
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
                graph_token_only: bool = False, groups: SizeGroups | None = None,
                group_bias: list[Tensor] | None = None) -> tuple[Tensor, Tensor | None]:
        """Returns the updated ``x`` and, with ``need_weights``, the attention probabilities.

        With ``graph_token_only`` only position 0 is updated and returned (``[B, 1, D]``).
        ``groups`` and ``group_bias``: attention per group of similar-sized graphs (see
        :meth:`BiasedMultiheadAttention.forward`).
        """
        num_queries = 1 if graph_token_only else None
        attended, weights = self.attention(self.attn_norm(x, node_mask), bias, need_weights,
                                           num_queries, groups, group_bias)
        if graph_token_only:
            x, node_mask = x[:, :1], node_mask[:, :0]
        x = self.dropout(attended, residual=x)
        x = self.dropout(self.ffn(self.ffn_norm(x, node_mask)), residual=x)
        return x, weights

    def forward_packed(self, x: Tensor, graph_rows: Tensor, groups: SizeGroups,
                       group_bias: list[Tensor], graph_token_only: bool = False
                       ) -> tuple[Tensor, Tensor]:
        """The layer on packed size groups: tokens as rows ``x`` ``[T, D]``.

        ``graph_rows`` ``[B]``: the graph tokens' rows. Every token-wise part runs on the
        ``T`` rows only, not on the ``B * L`` of the padded grid (random batches of MolHIV
        molecules are about two thirds padding there). With ``graph_token_only`` the output is
        the graph tokens' rows ``[B, D]`` (the rows are then ``0..B-1``).

        Returns:
            The updated rows and the graph tokens' rows in them.
        """
        attended = self.attention.attend_packed(self.attn_norm.normalize_rows(x, graph_rows),
                                                groups, group_bias)
        if graph_token_only:
            x, attended = x.index_select(0, graph_rows), attended.index_select(0, graph_rows)
            graph_rows = torch.arange(len(graph_rows), device=x.device)
        x = self.dropout(attended, residual=x)
        x = self.dropout(self.ffn(self.ffn_norm.normalize_rows(x, graph_rows)), residual=x)
        return x, graph_rows
