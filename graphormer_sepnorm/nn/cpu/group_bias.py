"""The attention bias of each size group, written straight from the atom pairs' biases.

Never the batch-wide ``[B, H, L, L]`` tensor: with one large molecule in a MolHIV batch it is
five times the groups' and filling, cutting and summing it took a tenth of the training step.
Backward gathers the pairs' and the virtual distance's gradients straight from the groups'.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

from graphormer_sepnorm.nn.bias_encoders import padded_keys
from graphormer_sepnorm.nn.cpu.size_groups import SizeGroups


@dataclass
class _GroupPairs:
    """Where one group's atom pairs go: pair indices and flat positions in ``[H, B_g * L * L]``."""

    pairs: Tensor
    flat: Tensor
    keys: Tensor  # [B_g, L_g]: 0 on real keys, -inf on padded ones


def _plan(groups: SizeGroups, node_mask: Tensor, pair_slot: Tensor,
          inverse: Tensor | None) -> list[_GroupPairs]:
    """Each group's pairs; ``node_mask`` is in group (sorted) order, ``pair_slot`` in batch order.

    ``inverse[graph]`` is a graph's sorted position (``None``: the batch is sorted already).
    """
    n = node_mask.shape[1]
    graph, i, j = pair_slot // (n * n), pair_slot // n % n + 1, pair_slot % n + 1
    position = graph if inverse is None else inverse[graph]
    plans, start = [], 0
    for count, length in zip(groups.counts, groups.lengths, strict=True):
        pairs = torch.nonzero((position >= start) & (position < start + count)).squeeze(1)
        local = position[pairs] - start
        rows, cols = (j[pairs], i[pairs]) if groups.fused else (i[pairs], j[pairs])
        flat = (local * length + rows) * length + cols
        keys = padded_keys(node_mask[start:start + count, :length - 1], torch.float32)
        plans.append(_GroupPairs(pairs, flat, keys))
        start += count
    return plans


def _token_row_and_column(bias: Tensor, keys_first: bool) -> tuple[Tensor, Tensor]:
    """The graph token's query row and key column in ``[H, B_g, L, L]``, as views.

    The column leaves out the crossing, which the row has.
    """
    if keys_first:
        return bias[:, :, :, 0], bias[:, :, 0, 1:]
    return bias[:, :, 0, :], bias[:, :, 1:, 0]


def _assemble(pair: Tensor, virtual_distance: Tensor, group: _GroupPairs,
              keys_first: bool) -> Tensor:
    """One group's bias ``[H * B_g, L_g, L_g]``, head-major, keys-first if asked."""
    heads, (count, length) = pair.shape[1], group.keys.shape
    keys = group.keys.to(pair.dtype)
    bias = (keys[None, :, :, None] if keys_first else keys[None, :, None, :]).expand(
        heads, count, length, length).contiguous()
    distance = virtual_distance.view(heads, 1, 1)
    query_row, key_col = _token_row_and_column(bias, keys_first)
    query_row.add_(distance)
    key_col.add_(distance)
    bias.view(heads, -1).index_copy_(1, group.flat, pair[group.pairs].t())
    return bias.view(heads * count, length, length)


class _GroupBias(torch.autograd.Function):
    @staticmethod
    def forward(ctx: FunctionCtx, pair: Tensor, virtual_distance: Tensor,
                plans: list[_GroupPairs], keys_first: bool) -> tuple[Tensor, ...]:
        ctx.plans, ctx.keys_first = plans, keys_first  # type: ignore[attr-defined]
        ctx.pair_shape = pair.shape  # type: ignore[attr-defined]
        return tuple(_assemble(pair, virtual_distance, group, keys_first) for group in plans)

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, *grads: Tensor) -> tuple[Tensor | None, ...]:
        plans, keys_first = ctx.plans, ctx.keys_first  # type: ignore[attr-defined]
        heads = ctx.pair_shape[1]  # type: ignore[attr-defined]
        grad_pair = grads[0].new_zeros(ctx.pair_shape)  # type: ignore[attr-defined]
        grad_distance = grads[0].new_zeros(heads)
        for group, grad in zip(plans, grads, strict=True):
            count, length = group.keys.shape
            grad = grad.view(heads, count, length, length)
            grad_pair.index_copy_(0, group.pairs, grad.view(heads, -1)[:, group.flat].t())
            row, col = _token_row_and_column(grad, keys_first)
            grad_distance += row.sum((1, 2)) + col.sum((1, 2))
        return grad_pair, grad_distance, None, None


def group_biases(pair: Tensor, virtual_distance: Tensor, groups: SizeGroups,
                 node_mask: Tensor, pair_slot: Tensor,
                 inverse: Tensor | None = None) -> list[Tensor]:
    """Each group's attention bias: the full bias's group block, each graph cut to ``L_g``.

    Args:
        pair: ``[P, H]`` biases of the real atom pairs (spatial + edge), batch order.
        virtual_distance: ``[H]``, the graph token's bias to and from every position.
        groups: the size groups, graphs in sorted order (``groups.fused``: keys-first).
        node_mask: ``[B, N]`` in sorted order.
        pair_slot: ``[P]`` each pair's slot in the batch-order ``[B, N, N]`` grid.
        inverse: each graph's sorted position; ``None`` when the batch is sorted.

    Returns:
        ``[H * B_g, L_g, L_g]`` per group (head-major; ``[g, key, query]`` when fused).
    """
    plans = _plan(groups, node_mask, pair_slot, inverse)
    return list(_GroupBias.apply(pair, virtual_distance, plans, groups.fused))
