"""Encoders of atom pairs into per-head attention biases, and their sum with the graph token."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor, nn

from graphormer_sepnorm.data.collate import GraphormerBatch
from graphormer_sepnorm.nn.node_encoders import FeatureEmbedding

EdgeEncoding = Literal["multi_hop", "simple"]


class SpatialEncoder(nn.Module):
    """One learned scalar per head for each shortest-path distance.

    Args:
        num_heads: ``H``.
        max_distance: distances above it share its bucket. Default: 64.

    Unreachable pairs (distance ``-1``, atoms of different fragments) get a bucket of their own,
    so attention between fragments is learned, never blocked.

    Shapes:
        ``spd`` ``[P]`` long -> ``[P, H]``.
    """

    def __init__(self, num_heads: int, max_distance: int = 64) -> None:
        super().__init__()
        self.max_distance = max_distance
        self.embedding = nn.Embedding(max_distance + 2, num_heads)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Normal(0, 0.02) initialization, as in Graphormer."""
        nn.init.normal_(self.embedding.weight, std=0.02)

    def forward(self, spd: Tensor) -> Tensor:
        """Per-head bias of each pair."""
        bucket = torch.where(spd < 0, self.max_distance + 1, spd.clamp(max=self.max_distance))
        return self.embedding(bucket)


def hop_blocks(hop_pair: Tensor, hop_index: Tensor) -> list[int] | None:
    """Hops per hop index when the lists are hop-major with nested pair prefixes, else None.

    The collator lists every pair's hop 0, then hop 1, ...; the pairs with a hop ``k`` are the
    first ones of those with hop ``k - 1`` (pairs sorted by decreasing distance).
    """
    if not len(hop_index) or bool((hop_index[1:] < hop_index[:-1]).any()):
        return None
    counts = torch.bincount(hop_index).tolist()
    first, start = hop_pair[: counts[0]], 0
    for count in counts:
        if count > len(first) or not torch.equal(hop_pair[start:start + count], first[:count]):
            return None
        start += count
    return counts


def sum_hops_by_pair(num_pairs: int, table: Tensor, rows: Tensor, hop_pair: Tensor,
                     hop_index: Tensor, blocks: list[int] | None = None) -> Tensor:
    """Each pair's sum of its hops' table rows: ``index_add(0, hop_pair, table[rows])``.

    On the CPU a scatter-add into pairs in random order is slow (42-55 ms for a batch of 256
    ZINC molecules against 11 ms this way, measured on one core). With the collator's
    hop-major layout the hops of block ``k`` line up with the first pairs of block 0, so each
    block is gathered and added as a slice, and block 0 holds each pair once, so the sums are
    copied to their rows, not added. Other layouts, and other devices, take ``index_add``.
    ``blocks`` (from :func:`hop_blocks`) skips finding the layout again.

    Shapes:
        ``table`` ``[R, H]``; ``rows``, ``hop_pair``, ``hop_index`` ``[M]`` -> ``[num_pairs, H]``.
    """
    out = table.new_zeros(num_pairs, table.shape[1])
    if blocks is None and table.device.type == "cpu":
        blocks = hop_blocks(hop_pair, hop_index)
    if blocks is None:
        return out.index_add(0, hop_pair, table.index_select(0, rows))
    return out.index_copy(0, hop_pair[: blocks[0]], _GatherSumHopBlocks.apply(table, rows, blocks))


class _GatherSumHopBlocks(torch.autograd.Function):
    """``[blocks[0], H]``: row ``r`` sums ``table[rows[start_k + r]]`` over the blocks ``k``.

    Gathers block by block, and its backward adds each block's gradient straight into the
    table's: autograd through a gather and slices would materialize ``[M, H]`` twice (the
    gathered rows, then one zero gradient per block: K full-size fills and adds, a quarter of a
    ZINC training step, measured) before scattering it.
    """

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, table: Tensor, rows: Tensor,
                blocks: list[int]) -> Tensor:
        ctx.blocks, ctx.num_rows = blocks, table.shape[0]  # type: ignore[attr-defined]
        ctx.save_for_backward(rows)
        summed, start = table.index_select(0, rows[: blocks[0]]), blocks[0]
        for count in blocks[1:]:
            summed[:count] += table.index_select(0, rows[start:start + count])
            start += count
        return summed

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: Tensor
                 ) -> tuple[Tensor, None, None]:
        (rows,) = ctx.saved_tensors
        blocks: list[int] = ctx.blocks  # type: ignore[attr-defined]
        table_grad, start = grad.new_zeros(ctx.num_rows, grad.shape[1]), 0  # type: ignore[attr-defined]
        for count in blocks:
            table_grad.index_add_(0, rows[start:start + count], grad[:count])
            start += count
        return table_grad, None, None


def _hops_below(k: int, hop_edge: Tensor, hop_index: Tensor, hop_pair: Tensor
                ) -> tuple[Tensor, Tensor, Tensor, list[int] | None]:
    """The hop lists cut to hop indices below ``k``, and their blocks (CPU hop-major layout).

    In the collator's hop-major layout these hops are a prefix: slicing it is free where boolean
    masks cost ~5 ms each per 256 ZINC molecules (measured).
    """
    blocks = hop_blocks(hop_pair, hop_index) if hop_index.device.type == "cpu" else None
    if blocks is None:
        used = hop_index < k
        return hop_edge[used], hop_index[used], hop_pair[used], None
    kept = sum(blocks[:k])
    return hop_edge[:kept], hop_index[:kept], hop_pair[:kept], blocks[:k]


class EdgePathEncoder(nn.Module):
    """Graphormer's edge encoding along shortest paths.

    ``multi_hop``: each edge is embedded per head (mean over its feature columns), hop ``k`` of
    the path is multiplied by its own learned ``H x H`` matrix, and the hops are summed and divided
    by the path length (capped at ``K``). The matrices are folded into a ``[K * E, H]`` table
    first, so each hop is one row gathered from it and summed into its pair: nothing of size
    ``[pairs, K, H]`` is materialized, and work is proportional to the hops that exist.
    ``simple``: only directly bonded pairs get their bond's embedding.

    Args:
        edge_feature_dims: number of values of each edge-feature column.
        num_heads: ``H``.
        multi_hop_max_dist: ``K``, hops of each path that count. Default: 20.
        encoding: ``'multi_hop'`` (default) or ``'simple'``.

    Shapes:
        ``edge_attr`` ``[E, F_edge]``; the hop lists ``hop_edge``, ``hop_index``, ``hop_pair``
        ``[M]`` (see :class:`~graphormer_sepnorm.data.collate.GraphormerBatch`); ``spd`` ``[P]``
        -> ``[P, H]``.
    """

    def __init__(self, edge_feature_dims: Sequence[int], num_heads: int,
                 multi_hop_max_dist: int = 20, encoding: EdgeEncoding = "multi_hop") -> None:
        super().__init__()
        if encoding not in ("multi_hop", "simple"):
            raise ValueError(f"unknown edge encoding {encoding!r}")
        self.encoding = encoding
        self.multi_hop_max_dist = multi_hop_max_dist
        self.edge_embedding = FeatureEmbedding(edge_feature_dims, num_heads, mode="mean")
        self.hop_weight = nn.Parameter(torch.empty(multi_hop_max_dist, num_heads, num_heads))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Normal(0, 0.02) initialization, as in Graphormer."""
        self.edge_embedding.reset_parameters()
        nn.init.normal_(self.hop_weight, std=0.02)

    def forward(self, edge_attr: Tensor, hop_edge: Tensor, hop_index: Tensor, hop_pair: Tensor,
                spd: Tensor) -> Tensor:
        """Edge bias of every pair; see the class docstring for shapes."""
        k = self.multi_hop_max_dist
        edges = self.edge_embedding(edge_attr)  # [E, H]
        heads = edges.shape[1]
        if self.encoding == "simple":
            direct = spd[hop_pair] == 1
            return edges.new_zeros(len(spd), heads).index_add(
                0, hop_pair[direct], edges[hop_edge[direct]])
        hop_edge, hop_index, hop_pair, blocks = _hops_below(k, hop_edge, hop_index, hop_pair)
        # Hop-major table [K * E, H]: the collator lists hops hop-major, so each block of
        # lookups stays within E rows (cache-resident); edge-major rows made the gather 2.8x
        # and its backward scatter 1.3x slower on one core (measured on a ZINC batch).
        table = torch.einsum("eh,khg->keg", edges, self.hop_weight).reshape(-1, heads)
        rows = hop_index * len(edges) + hop_edge
        out = sum_hops_by_pair(len(spd), table, rows, hop_pair, hop_index, blocks)
        return out / spd.clamp(min=1, max=k).unsqueeze(1).to(out.dtype)


def padded_keys(node_mask: Tensor, dtype: torch.dtype) -> Tensor:
    """``[B, 1 + N]``: 0 for the graph token and real atoms, ``-inf`` for padded positions.

    Added to every query's scores, it masks the padded keys (``node_mask`` ``[B, N]``).
    """
    keys = torch.zeros(node_mask.shape[0], node_mask.shape[1] + 1, dtype=dtype,
                       device=node_mask.device)
    keys[:, 1:].masked_fill_(~node_mask, float("-inf"))
    return keys


class AttentionBias(nn.Module):
    """The full attention bias of a batch, computed once and shared by every layer.

    Spatial bias plus edge bias on atom pairs, a learned per-head "virtual distance" on the graph
    token's row and column, and ``-inf`` on padded keys. Padded query rows still see the graph
    token, so no row is all ``-inf`` and softmax never yields NaN.

    Args:
        num_heads: ``H``.
        edge_feature_dims: see :class:`EdgePathEncoder`.
        max_distance: see :class:`SpatialEncoder`.
        multi_hop_max_dist: see :class:`EdgePathEncoder`.
        edge_encoding: see :class:`EdgePathEncoder`.

    Shapes:
        output ``[B, H, 1 + N, 1 + N]``.
    """

    def __init__(self, num_heads: int, edge_feature_dims: Sequence[int], max_distance: int = 64,
                 multi_hop_max_dist: int = 20, edge_encoding: EdgeEncoding = "multi_hop") -> None:
        super().__init__()
        self.spatial = SpatialEncoder(num_heads, max_distance)
        self.edge = EdgePathEncoder(edge_feature_dims, num_heads, multi_hop_max_dist,
                                    edge_encoding)
        self.virtual_distance = nn.Parameter(torch.empty(num_heads))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-initializes the encoders and the virtual distance."""
        self.spatial.reset_parameters()
        self.edge.reset_parameters()
        nn.init.normal_(self.virtual_distance, std=0.02)

    def pair_bias(self, batch: GraphormerBatch) -> Tensor:
        """Spatial plus edge bias of the real atom pairs, ``[P, H]`` (``batch.pair_slot``)."""
        return self.spatial(batch.pair_spd) + self.edge(
            batch.edge_attr, batch.hop_edge, batch.hop_index, batch.hop_pair, batch.pair_spd)

    def forward(self, batch: GraphormerBatch) -> Tensor:
        """Bias for ``batch``, ``[B, H, 1 + N, 1 + N]``."""
        b, n = batch.node_mask.shape
        pair = self.pair_bias(batch)
        heads = pair.shape[1]
        # Graph-token row and column get the virtual distance, padded keys -inf; then the pairs
        # are written in place. Built directly in [B, H, L, L] so no permuted copy is needed.
        token_edge = torch.zeros(n + 1, n + 1, dtype=pair.dtype, device=pair.device)
        token_edge[0] = token_edge[:, 0] = 1
        keys = padded_keys(batch.node_mask, pair.dtype)
        bias = keys[:, None, None, :] + token_edge * self.virtual_distance.view(heads, 1, 1)
        slot = batch.pair_slot
        graph, i, j = slot // (n * n), slot // n % n + 1, slot % n + 1
        bias[graph, :, i, j] = pair
        return bias
