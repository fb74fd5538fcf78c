"""Encoders of atom pairs into per-head attention biases, and their sum with the graph token."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphormer_sepnorm.data.batch import GraphormerBatch
from graphormer_sepnorm.nn.config import EdgeEncoding
from graphormer_sepnorm.nn.node_encoders import FeatureEmbedding


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

    ``multi_hop``: ``bias(i, j) = 1 / min(d_ij, K) * sum_{k < min(d_ij, K)} w_k^T emb(e_k)``,
    ``emb`` a per-head embedding of each edge (mean over its feature columns) and ``w_k`` a
    learned ``H x H`` matrix per hop, folded into the table of :meth:`hop_table`.
    ``simple``: only directly bonded pairs get their bond's embedding.

    Args:
        edge_feature_dims: number of values of each edge-feature column.
        num_heads: ``H``.
        multi_hop_max_dist: ``K``, hops of each path that count. Default: 20.
        encoding: ``'multi_hop'`` (default) or ``'simple'``.

    Shapes:
        a batch with ``E`` edges and ``P`` pairs
        (:class:`~graphormer_sepnorm.data.batch.GraphormerBatch`) -> ``[P, H]``.

    Examples:
        >>> from torch_geometric.data import Data
        >>> from graphormer_sepnorm.data.collate import GraphormerCollator
        >>> path = Data(x=torch.zeros(3, 1, dtype=torch.long),  # 0 - 1 - 2
        ...             edge_index=torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]),
        ...             edge_attr=torch.tensor([[1], [1], [3], [3]]))
        >>> encoder = EdgePathEncoder([4], num_heads=2, multi_hop_max_dist=2)
        >>> encoder(GraphormerCollator(2)([path])).shape  # 9 pairs
        torch.Size([9, 2])
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
        """Each (hop, edge)'s bias ``[K * E, H]``: row ``k * E + e`` is edge ``e`` at hop ``k``."""
        edges = self.edge_embedding(edge_attr)  # [E, H]
        return torch.einsum("eh,khg->keg", edges, self.hop_weight).reshape(-1, edges.shape[1])

    def forward(self, batch: GraphormerBatch) -> Tensor:
        """Edge bias of every pair of ``batch``; see the class docstring for shapes."""
        spd = batch.pair_spd
        if self.encoding == "simple":  # hop 0 of a pair at distance 1 is its bond
            bonds = batch.hop_sums(self.edge_embedding(batch.edge_attr), hops=1)
            return bonds * (spd == 1).unsqueeze(1).to(bonds.dtype)
        k = self.multi_hop_max_dist
        out = batch.hop_sums(_sum_precision(self.hop_table(batch.edge_attr)), hops=k)
        return out / spd.clamp(min=1, max=k).unsqueeze(1).to(out.dtype)


def _sum_precision(table: Tensor) -> Tensor:
    """``table`` in at least float32 (autocast's ``einsum`` gives bfloat16), for the hop sums."""
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

    Spatial plus edge bias on atom pairs, a learned per-head virtual distance on the graph
    token's row and column, ``-inf`` on padded keys (never a whole row: no NaN).

    Args:
        num_heads: ``H``.
        edge_feature_dims: see :class:`EdgePathEncoder`.
        max_distance: see :class:`SpatialEncoder`.
        multi_hop_max_dist: see :class:`EdgePathEncoder`.
        edge_encoding: see :class:`EdgePathEncoder`.

    Shapes:
        a :class:`~graphormer_sepnorm.data.batch.GraphormerBatch` of ``B`` graphs padded to
        ``N`` atoms -> ``[B, H, 1 + N, 1 + N]``.

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
        """Spatial plus edge bias of the batch's atom pairs, ``[P, H]``."""
        return self.spatial(batch.pair_spd) + self.edge(batch)

    def forward(self, batch: GraphormerBatch) -> Tensor:
        """Bias for ``batch``, ``[B, H, 1 + N, 1 + N]``."""
        n = batch.node_mask.shape[1]
        pair = self.pair_bias(batch)
        heads = pair.shape[1]
        # built directly in [B, H, L, L]: no permuted copy
        token_edge = torch.zeros(n + 1, n + 1, dtype=pair.dtype, device=pair.device)
        token_edge[0] = token_edge[:, 0] = 1
        keys = padded_keys(batch.node_mask, pair.dtype)
        bias = keys[:, None, None, :] + token_edge * self.virtual_distance.view(heads, 1, 1)
        return batch.with_pairs(bias, pair)
