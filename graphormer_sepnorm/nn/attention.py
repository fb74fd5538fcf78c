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

    Uses ``F.scaled_dot_product_attention`` on GPUs (fused kernels; the float bias is
    differentiable) and :func:`~graphormer_sepnorm.nn.attention_core.biased_attention` on the
    CPU. With ``need_weights`` the scores are computed explicitly so the attention
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
        queries = length if num_queries is None else num_queries
        bias = bias if num_queries is None else bias[:, :, :num_queries]
        dropout_p = self.dropout if self.training else 0.0
        head_dim = dim // self.num_heads
        qkv = self.qkv(x).view(b, length, 3, self.num_heads, head_dim)
        if x.device.type == "cpu" and not need_weights:
            # SDPA on the CPU is slower for head dim 10 (12 against 9 ms for 128 graphs of 29
            # tokens), and with dropout falls back to an unfused kernel keeping three
            # score-sized tensors; biased_attention works head-dim-major ([G, d, L]), where
            # MKL's small products are 3x faster, and keeps the probabilities and a uint8 mask.
            q_t, k_t, v_t = qkv.permute(2, 0, 3, 4, 1).reshape(3, -1, head_dim, length)
            out_t = biased_attention(q_t[..., :queries], k_t, v_t,
                                     bias.reshape(-1, queries, length), head_dim**-0.5, dropout_p)
            return out_t.view(b, dim, queries).transpose(1, 2), None
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        q = q[:, :, :queries]
        if not need_weights:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype),
                                                 dropout_p=dropout_p)
            return out.transpose(1, 2).reshape(b, queries, dim), None
        scores = torch.baddbmm(bias.reshape(-1, queries, length),
                               q.reshape(-1, queries, head_dim),
                               k.reshape(-1, length, head_dim).transpose(1, 2),
                               alpha=head_dim**-0.5)
        weights = scores.softmax(-1).view(b, self.num_heads, queries, length)
        out = dropout(weights, dropout_p) @ v
        return out.transpose(1, 2).reshape(b, queries, dim), weights
