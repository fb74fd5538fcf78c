"""Multi-head self-attention with an additive per-head bias."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphormer_sepnorm.nn.dropout import dropout
from graphormer_sepnorm.nn.head_major import (
    attend_groups_fused,
    attend_head_major,
    head_minor_rows,
)
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
        token when the model just predicts. Only those rows of ``bias`` are read, so it may be
        ``[B, H, num_queries, L]``.

        With ``groups`` (and ``group_bias = groups.split_bias(bias)``, or the same built
        directly by :func:`~graphormer_sepnorm.nn.group_bias.group_biases`) attention runs per
        group of similar-sized graphs, each cut to its own length (see
        :mod:`~graphormer_sepnorm.nn.size_groups`); positions past a group's length get zeros,
        and ``bias`` is not read when ``group_bias`` is given. Ignored with ``need_weights`` or
        ``num_queries``.
        """
        if x.device.type == "cpu" and not need_weights:
            return self._attend_cpu(x, bias, num_queries, groups, group_bias), None
        out, weights = self._attend(x, bias, need_weights, num_queries)
        return self.out(out), weights

    def _attend_cpu(self, x: Tensor, bias: Tensor, num_queries: int | None,
                    groups: SizeGroups | None, group_bias: list[Tensor] | None) -> Tensor:
        """The CPU path: head-major blocks (see :mod:`~graphormer_sepnorm.nn.head_major`).

        SDPA on the CPU is slower at head dim 10 (12 against 9 ms for 128 graphs of 29 tokens)
        and with dropout falls back to an unfused kernel keeping three score-sized tensors.
        """
        heads = self.num_heads
        p = self.dropout if self.training else 0.0
        if groups is None or num_queries is not None:
            queries = x.shape[1] if num_queries is None else num_queries
            bias = bias[:, :, :queries].transpose(0, 1).reshape(-1, queries, x.shape[1])
            return attend_head_major(x, *self._head_minor_projections(), bias, heads,
                                     num_queries, p)
        if group_bias is None:
            group_bias = groups.split_bias(bias)
        if groups.fused:
            # the C kernel, all groups in one call; nn.Linear's row order, keys-first biases
            rows = groups.rows if groups.rows is not None else groups.token_rows(x.device)
            return attend_groups_fused(x, rows, self.qkv.weight, self.qkv.bias,
                                       self.out.weight.t(), self.out.bias, group_bias,
                                       groups.counts, groups.lengths, heads, p)
        projections = self._head_minor_projections()
        return groups.merge([attend_head_major(part, *projections, part_bias, heads, None, p)
                             for part, part_bias in zip(groups.split(x), group_bias,
                                                        strict=True)])

    def attend_packed(self, x: Tensor, groups: SizeGroups, group_bias: list[Tensor]) -> Tensor:
        """Attention on packed size groups ``x`` ``[T, D]`` through the fused C kernel.

        ``x`` holds group after group, each graph cut to its group's length ``L_g`` (``T`` the
        sum of ``B_g * L_g``, see :meth:`SizeGroups.token_rows`); ``group_bias`` as in
        :meth:`forward`. Returns ``[T, D]``.
        """
        p = self.dropout if self.training else 0.0
        return attend_groups_fused(x[None], None, self.qkv.weight, self.qkv.bias,
                                   self.out.weight.t(), self.out.bias, group_bias,
                                   groups.counts, groups.lengths, self.num_heads, p)[0]

    def _head_minor_projections(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The torch path's weights: q/k/v and output rows reordered by head_minor_rows."""
        heads = self.num_heads
        return (head_minor_rows(self.qkv.weight, heads, 3),
                head_minor_rows(self.qkv.bias, heads, 3),
                head_minor_rows(self.out.weight.t(), heads, 1), self.out.bias)

    def _attend(self, x: Tensor, bias: Tensor, need_weights: bool = False,
                num_queries: int | None = None) -> tuple[Tensor, Tensor | None]:
        """Attention before the output projection: ``[B, Lq, D]`` and the weights, if asked."""
        b, length, dim = x.shape
        queries = length if num_queries is None else num_queries
        bias = bias if num_queries is None else bias[:, :, :num_queries]
        dropout_p = self.dropout if self.training else 0.0
        head_dim = dim // self.num_heads
        qkv = self.qkv(x).view(b, length, 3, self.num_heads, head_dim)
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
