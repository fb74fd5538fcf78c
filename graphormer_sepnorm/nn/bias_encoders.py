"""Encoders of atom pairs into per-head attention biases, and their sum with the graph token."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
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

    Examples:
        >>> spatial = SpatialEncoder(num_heads=4, max_distance=8)
        >>> spatial(torch.tensor([0, 1, 8, 20, -1])).shape  # 20 shares 8's bucket
        torch.Size([5, 4])
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
        far = self.max_distance  # int32 indices: half the bytes the backward keeps of int64
        return self.embedding(torch.where(spd < 0, far + 1, spd.int().clamp(max=far)))


class EdgePathEncoder(nn.Module):
    """Graphormer's edge encoding along shortest paths.

    ``multi_hop``: each edge is embedded per head (mean over its feature columns), hop ``k`` of
    the path is multiplied by its own learned ``H x H`` matrix, and the hops are summed and divided
    by the path length (capped at ``K``):
    ``bias(i, j) = 1 / min(d_ij, K) * sum_{k < min(d_ij, K)} w_k^T emb(e_k)``.
    The matrices are folded into a ``[K * E, H]`` table (:meth:`hop_table`), so each hop is one
    row gathered from it and summed into its pair.
    ``simple``: only directly bonded pairs get their bond's embedding.

    Args:
        edge_feature_dims: number of values of each edge-feature column.
        num_heads: ``H``.
        multi_hop_max_dist: ``K``, hops of each path that count. Default: 20.
        encoding: ``'multi_hop'`` (default) or ``'simple'``.

    Shapes:
        ``edge_attr`` ``[E, F_edge]``; the hop lists ``hop_edge``, ``hop_index``, ``hop_pair``
        ``[M]`` (see :class:`~graphormer_sepnorm.data.collate.GraphormerBatch`); ``spd`` ``[P]``
        -> ``[P, H]``; ``per_pair`` (grid batches): ``hop_edge``, ``hop_index`` ``[P, S]``.
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

    def hop_table(self, edge_attr: Tensor) -> Tensor:
        """Each (hop, edge)'s bias ``[K * E, H]``: row ``k * E + e`` is edge ``e`` at hop ``k``.

        The per-hop matrices folded into the edge embeddings, so each hop of a path is one row.
        """
        edges = self.edge_embedding(edge_attr)  # [E, H]
        return torch.einsum("eh,khg->keg", edges, self.hop_weight).reshape(-1, edges.shape[1])

    def forward(self, edge_attr: Tensor, hop_edge: Tensor, hop_index: Tensor, hop_pair: Tensor,
                spd: Tensor, per_pair: bool = False) -> Tensor:
        """Edge bias of every pair; see the class docstring for shapes.

        Examples:
            >>> encoder = EdgePathEncoder([4], num_heads=2, multi_hop_max_dist=2)
            >>> # one path 0 -> 1 -> 2: pair 0 is (0, 2) at distance 2, its hops edges 0 and 2
            >>> out = encoder(torch.tensor([[1], [1], [3], [3]]), hop_edge=torch.tensor([0, 2]),
            ...               hop_index=torch.tensor([0, 1]), hop_pair=torch.tensor([0, 0]),
            ...               spd=torch.tensor([2]))
            >>> out.shape
            torch.Size([1, 2])
        """
        if per_pair:
            return self._per_pair(edge_attr, hop_edge, hop_index, spd)
        k, num_edges = self.multi_hop_max_dist, len(edge_attr)
        if self.encoding == "simple":
            edges = self.edge_embedding(edge_attr)
            direct = ((hop_index == 0) & (spd[hop_pair] == 1)).unsqueeze(1)
            return edges.new_zeros(len(spd), edges.shape[1]).index_add(
                0, hop_pair, edges[hop_edge] * direct)
        table = _sum_precision(self.hop_table(edge_attr))
        # hops past K count for nothing; a product, not a boolean selection, keeps this free of
        # host synchronization (the collator usually keeps no more than K hops anyway)
        kept = (hop_index < k).unsqueeze(1).to(table.dtype)
        rows = hop_index.clamp(max=k - 1) * num_edges + hop_edge
        out = table.new_zeros(len(spd), table.shape[1]).index_add(0, hop_pair, table[rows] * kept)
        return out / spd.clamp(min=1, max=k).unsqueeze(1).to(out.dtype)

    def _per_pair(self, edge_attr: Tensor, hop_edge: Tensor, hop_index: Tensor,
                  spd: Tensor) -> Tensor:
        """Grid layout (``hop_index`` ``[P, S]``): each pair's first ``min(d, K)`` slots summed."""
        k = self.multi_hop_max_dist
        if self.encoding == "simple":
            return self.edge_embedding(edge_attr)[hop_edge[:, 0].long()] * (spd == 1).unsqueeze(1)
        table = _sum_precision(self.hop_table(edge_attr))
        rows = hop_index.clamp(max=k - 1).int() * len(edge_attr) + hop_edge.int()  # int32 saved
        kept = (hop_index < spd.clamp(min=0, max=k).unsqueeze(-1)).unsqueeze(-1).to(table.dtype)
        out = (F.embedding(rows, table) * kept).sum(1)
        return out / spd.clamp(min=1, max=k).unsqueeze(1).to(out.dtype)


def _sum_precision(table: Tensor) -> Tensor:
    """``table`` in at least float32, for the sums over hops.

    Under autocast the hop table comes out of ``einsum`` in bfloat16, and up to ``K`` hops are
    summed from it.
    """
    return table.to(torch.promote_types(table.dtype, torch.float32))


def padded_keys(node_mask: Tensor, dtype: torch.dtype) -> Tensor:
    """``[B, 1 + N]``: 0 for the graph token and real atoms, ``-inf`` for padded positions.

    Added to every query's scores, it masks the padded keys (``node_mask`` ``[B, N]``).
    """
    atoms = torch.zeros(node_mask.shape, dtype=dtype, device=node_mask.device)
    # out of place, so that it also runs under vmap (packed replicas)
    return F.pad(atoms.masked_fill(~node_mask, float("-inf")), (1, 0))


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
        a :class:`~graphormer_sepnorm.data.collate.GraphormerBatch` (``node_mask``,
        ``pair_slot``, ``pair_spd``, ``edge_attr`` and the hop lists) -> ``[B, H, 1 + N, 1 + N]``.

    Examples:
        >>> from torch_geometric.data import Data
        >>> from graphormer_sepnorm.data.collate import GraphormerCollator
        >>> pair = Data(x=torch.zeros(2, 1, dtype=torch.long), edge_index=torch.tensor([[0, 1],
        ...             [1, 0]]), edge_attr=torch.zeros(2, 1, dtype=torch.long))
        >>> atom = Data(x=torch.zeros(1, 1, dtype=torch.long),
        ...             edge_index=torch.zeros(2, 0, dtype=torch.long),
        ...             edge_attr=torch.zeros(0, 1, dtype=torch.long))
        >>> bias = AttentionBias(num_heads=2, edge_feature_dims=[4])(
        ...     GraphormerCollator()([pair, atom]))
        >>> bias.shape, bool(bias[1, :, :, 2].isinf().all())  # the lone atom's padded key
        (torch.Size([2, 2, 3, 3]), True)
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
        hops = (batch.edge_attr, batch.hop_edge, batch.hop_index, batch.hop_pair)
        return self.spatial(batch.pair_spd) + self.edge(*hops, batch.pair_spd, batch.is_grid)

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
        if batch.is_grid:  # the pairs are the whole [B, N, N] grid, in order
            return bias + F.pad(pair.view(b, n, n, heads).permute(0, 3, 1, 2), (1, 0, 1, 0))
        slot = batch.pair_slot
        graph, i, j = slot // (n * n), slot // n % n + 1, slot % n + 1
        bias[graph, :, i, j] = pair
        return bias
