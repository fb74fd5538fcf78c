"""Collate PyG graphs into a :class:`~graphormer_sepnorm.data.batch.GraphormerBatch`.

Pair quantities are flat lists over the batch's real pairs and each shortest path a list of its
actual hops, never ``[B, N, N, hops]`` blocks (``docs/concepts/batching.md``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from graphormer_sepnorm.data.batch import GraphormerBatch, as_long_2d
from graphormer_sepnorm.data.shortest_paths import AddShortestPaths

_add_spd = AddShortestPaths()


def _ranges(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For counts ``c_g``: the owner ``g`` and the local index ``0..c_g-1`` of every element."""
    owner = np.repeat(np.arange(len(counts)), counts)
    starts = np.cumsum(counts) - counts
    return owner, np.arange(len(owner)) - starts[owner]


def _first_hop_edges(
    edge_index: np.ndarray, edge_graph: np.ndarray, n: np.ndarray, pair_ptr: np.ndarray,
    spd: np.ndarray,
) -> np.ndarray:
    """For every pair ``(i, j)``: an edge ``i -> v`` that starts a shortest path to ``j``.

    An edge ``u -> v`` starts a shortest path from ``u`` to ``j`` exactly when
    ``spd[v, j] == spd[u, j] - 1``. Candidates are written in increasing edge order and numpy keeps
    the last write of a repeated index, so the largest such edge id is taken: deterministic.
    Returns ``[P]`` edge ids, ``-1`` where none exists (``i == j`` or unreachable).
    """
    edge_n = n[edge_graph]
    edge_rep, j = _ranges(edge_n)
    # pair (u, j) of edge u -> v sits at row_u + j; likewise (v, j)
    row_u = np.repeat(pair_ptr[edge_graph] + edge_index[0] * edge_n, edge_n)
    row_v = np.repeat(pair_ptr[edge_graph] + edge_index[1] * edge_n, edge_n)
    from_u = row_u + j
    d_from_u = spd[from_u]
    starts_path = (d_from_u >= 1) & (spd[row_v + j] == d_from_u - 1)
    first = np.full(len(spd), -1, dtype=np.int64)
    first[from_u[starts_path]] = edge_rep[starts_path]
    return first


def _walk_paths(spd: np.ndarray, max_hops: int, first: np.ndarray, successor: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, ...]]:
    """The hops of one shortest path per pair, up to ``max_hops`` each.

    ``successor[p]`` is the pair ``(v, j)`` reached from pair ``p = (i, j)`` by its first edge
    ``first[p] = (i -> v)``. Pairs are sorted by decreasing distance once, so the pairs still
    walking at hop ``k`` are a prefix. Returns ``(hop_pair, hop_index, hop_edge)``, by hop, and
    the hops per hop index (``GraphormerBatch.hop_counts``).
    """
    pair = np.flatnonzero(spd >= 1)
    pair = pair[np.argsort(-spd[pair].astype(np.int16), kind="stable")]
    # walking[k]: how many pairs have a hop k, i.e. distance > k
    walking = len(pair) - np.searchsorted(spd[pair][::-1], np.arange(max_hops), side="right")
    hop_edge = np.empty(int(walking.sum()), dtype=np.int64)
    cur, start = pair, 0
    for k in range(max_hops):
        cur = cur[: walking[k]]
        hop_edge[start:start + walking[k]] = first[cur]
        cur = successor[cur]
        start += walking[k]
    hop_pair = np.concatenate([pair[:count] for count in walking]) if max_hops else pair[:0]
    return hop_pair, np.repeat(np.arange(max_hops), walking), hop_edge, tuple(walking.tolist())


class GraphormerCollator:
    """Turns a list of PyG ``Data`` into a :class:`GraphormerBatch`.

    Each graph needs ``x`` (``[N]`` or ``[N, F_node]`` long), ``edge_index`` and ``edge_attr``
    (``[E]`` or ``[E, F_edge]`` long); ``spd`` from :class:`AddShortestPaths` is computed on the
    fly when missing; ``y`` and ``mol_x`` (``[1, F_mol]`` molecule features) are optional.

    Args:
        multi_hop_max_dist: ``K``, how many hops of each shortest path to keep. Default: 20.
    """

    def __init__(self, multi_hop_max_dist: int = 20) -> None:
        if multi_hop_max_dist < 1:
            raise ValueError("multi_hop_max_dist must be at least 1")
        self.multi_hop_max_dist = multi_hop_max_dist

    def __call__(self, graphs: Sequence[Data]) -> GraphormerBatch:
        """Collates ``graphs`` (a list of PyG ``Data``)."""
        graphs = [g if getattr(g, "spd", None) is not None else _add_spd(g.clone())
                  for g in graphs]
        spds = [g.spd for g in graphs]
        edge_indices = [g.edge_index for g in graphs]
        n = np.sqrt([len(d) for d in spds]).round().astype(np.int64)
        max_nodes = int(n.max())
        node_graph, node_local = _ranges(n)
        pair_graph, pair_local = _ranges(n * n)
        pair_ptr = np.cumsum(n * n) - n * n
        edge_graph, _ = _ranges(np.array([e.shape[1] for e in edge_indices], dtype=np.int64))
        # edge_index stays in graph-local node ids: pair lookups need local ids.
        edge_index = torch.cat(edge_indices, 1).numpy().astype(np.int64)
        spd = torch.cat(spds).numpy()  # int16: sorts by radix, below
        pair_n = n[pair_graph]
        pair_i, pair_j = pair_local // pair_n, pair_local % pair_n
        first = _first_hop_edges(edge_index, edge_graph, n, pair_ptr, spd)
        successor = np.arange(len(spd))  # a finished pair (j, j) is its own successor
        has = first >= 0
        successor[has] = (pair_ptr[pair_graph[has]] + edge_index[1, first[has]] * pair_n[has]
                          + pair_j[has])
        hop_pair, hop_index, hop_edge, hop_counts = _walk_paths(
            spd, min(self.multi_hop_max_dist, int(spd.max(initial=0))), first, successor)
        node_ptr = np.cumsum(n) - n
        degree = np.bincount(edge_index[1] + node_ptr[edge_graph], minlength=len(node_graph))
        t = torch.from_numpy
        return GraphormerBatch(
            x=as_long_2d(torch.cat([g.x for g in graphs])),
            degree=t(degree),
            node_slot=t(node_graph * max_nodes + node_local),
            node_mask=t(np.arange(max_nodes)[None, :] < n[:, None]),
            edge_attr=as_long_2d(torch.cat([g.edge_attr for g in graphs])),
            pair_slot=t((pair_graph * max_nodes + pair_i) * max_nodes + pair_j),
            pair_spd=t(spd).long(),
            hop_pair=t(hop_pair),
            hop_index=t(hop_index),
            hop_edge=t(hop_edge),
            y=_stack_targets(graphs),
            mol_x=_stack_mol_features(graphs),
            hop_counts=hop_counts,
        )


def _stack_targets(graphs: Sequence[Data]) -> Tensor | None:
    if any(getattr(g, "y", None) is None for g in graphs):
        return None
    return torch.cat([g.y.reshape(1, -1) for g in graphs]).float()


def _stack_mol_features(graphs: Sequence[Data]) -> Tensor | None:
    present = [getattr(g, "mol_x", None) is not None for g in graphs]
    if not any(present):
        return None
    if not all(present):
        raise ValueError("some graphs of the batch have molecule features (mol_x), others not")
    return torch.cat([g.mol_x.reshape(1, -1) for g in graphs]).float()
