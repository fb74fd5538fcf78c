"""Multi-head self-attention with an additive per-head bias."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphormer_sepnorm.nn.attention_core import biased_attention
from graphormer_sepnorm.nn.dropout import dropout
from graphormer_sepnorm.nn.size_groups import SizeGroups


class BiasedMultiheadAttention(nn.Module):
    """Self-attention whose scores get an additive bias ``[B, H, L, L]`` before the softmax.

    Uses ``F.scaled_dot_product_attention`` (fused kernels on CPU and GPU; the float bias is
    differentiable). With ``need_weights`` the scores are computed explicitly so the attention
    probabilities can be returned, e.g. for plotting the graph token's attention to atoms.

    Args:
        dim: model size ``D``.
        num_heads: ``H``; must divide ``D``.
        dropout: dropout on the attention probabilities. Default: 0.0.

    Shapes:
        ``x`` ``[B, L, D]``, ``bias`` ``[B, H, L, L]`` -> ``[B, L, D]`` and, with
        ``need_weights``, the probabilities ``[B, H, L, L]``.
    """

    def __init__(self, dim: int, num_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"hidden size {dim} is not divisible by {num_heads} heads")
        self.num_heads = num_heads
        self.dropout = dropout
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: Tensor, bias: Tensor, need_weights: bool = False,
                num_queries: int | None = None, groups: SizeGroups | None = None,
                group_bias: list[Tensor] | None = None) -> tuple[Tensor, Tensor | None]:
        """Attends; see the class docstring for shapes.

        With ``num_queries`` only the first positions attend (keys and values are still all of
        ``x``); the output is then ``[B, num_queries, D]``. The last layer needs only the graph
        token when the model just predicts.

        With ``groups`` (and ``group_bias = groups.split_bias(bias)``) attention runs per group
        of similar-sized graphs, each cut to its own length (see
        :mod:`~graphormer_sepnorm.nn.size_groups`); positions past a group's length get zeros.
        Ignored with ``need_weights`` or ``num_queries``.
        """
        if groups is not None and not need_weights and num_queries is None:
            if group_bias is None:
                group_bias = groups.split_bias(bias)
            # projected per group: the padded merge is then not kept for backward
            parts = [self.out(self._attend(part, part_bias.view(part.shape[0], self.num_heads,
                                                                *part_bias.shape[1:]))[0])
                     for part, part_bias in zip(groups.split(x), group_bias, strict=True)]
            return groups.merge(parts), None
        out, weights = self._attend(x, bias, need_weights, num_queries)
        return self.out(out), weights

    def _attend(self, x: Tensor, bias: Tensor, need_weights: bool = False,
                num_queries: int | None = None) -> tuple[Tensor, Tensor | None]:
        """Attention before the output projection: ``[B, Lq, D]`` and the weights, if asked."""
        b, length, dim = x.shape
        q, k, v = self.qkv(x).view(b, length, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        if num_queries is not None:
            q, bias = q[:, :, :num_queries], bias[:, :, :num_queries]
        queries = q.shape[2]
        weights = None
        dropout_p = self.dropout if self.training else 0.0
        head_dim = q.shape[-1]
        if need_weights:
            scores = torch.baddbmm(bias.reshape(-1, queries, length),
                                   q.reshape(-1, queries, head_dim),
                                   k.reshape(-1, length, head_dim).transpose(1, 2),
                                   alpha=head_dim**-0.5)
            weights = scores.softmax(-1).view(b, self.num_heads, queries, length)
            out = dropout(weights, dropout_p) @ v
        elif dropout_p > 0 and x.device.type == "cpu":
            # On the CPU, SDPA's dropout path falls back to an unfused kernel that keeps three
            # score-sized tensors; this one keeps the probabilities and a bool mask.
            out = biased_attention(q.reshape(-1, queries, head_dim),
                                   k.reshape(-1, length, head_dim),
                                   v.reshape(-1, length, head_dim),
                                   bias.reshape(-1, queries, length), head_dim**-0.5, dropout_p)
            out = out.view(b, self.num_heads, queries, head_dim)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype),
                                                 dropout_p=dropout_p)
        return out.transpose(1, 2).reshape(b, queries, dim), weights
