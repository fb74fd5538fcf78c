"""All-pairs shortest-path distances for many small graphs at once, and as a PyG transform.

Graphs are grouped by node count and each group runs one vectorized Floyd-Warshall over a
stacked ``[G, N, N]`` array: N numpy operations per group instead of N per graph.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

UNREACHABLE = -1
"""Distance recorded for pairs with no path between them (different fragments)."""

_INF = 10_000  # larger than any distance we store; two of them still fit in int16


def floyd_warshall(adjacency: np.ndarray) -> np.ndarray:
    """Hop distances for a stack of same-sized graphs.

    Args:
        adjacency: ``[G, N, N]`` bool, ``adjacency[g, i, j]`` true when graph ``g`` has an edge
            ``i -> j``.

    Returns:
        ``[G, N, N]`` int16 hop counts; ``UNREACHABLE`` (-1) where no path exists.
    """
    g, n, _ = adjacency.shape
    if n >= _INF:
        raise ValueError(f"graphs with {n} nodes are beyond the int16 distance range")
    dist = np.where(adjacency, 1, _INF).astype(np.int16)
    dist[:, np.arange(n), np.arange(n)] = 0
    for k in range(n):
        np.minimum(dist, dist[:, :, k, None] + dist[:, None, k, :], out=dist)
    dist[dist >= _INF] = UNREACHABLE
    return dist


def _adjacency(edge_index: np.ndarray, num_nodes: int) -> np.ndarray:
    adj = np.zeros((num_nodes, num_nodes), dtype=bool)
    adj[edge_index[0], edge_index[1]] = True
    return adj


def batched_shortest_paths(
    edge_indices: Sequence[np.ndarray], num_nodes: Sequence[int]
) -> list[np.ndarray]:
    """Shortest-path distance matrices for many graphs, grouped by size for speed.

    Args:
        edge_indices: one ``[2, E_g]`` integer array per graph (local node ids).
        num_nodes: the node count of each graph.

    Returns:
        One ``[N_g, N_g]`` int16 matrix per graph, in input order, ``-1`` where unreachable.
    """
    groups: dict[int, list[int]] = defaultdict(list)
    for idx, n in enumerate(num_nodes):
        groups[int(n)].append(idx)
    out: list[np.ndarray | None] = [None] * len(num_nodes)
    for n, members in groups.items():
        adj = np.zeros((len(members), n, n), dtype=bool)
        for row, idx in enumerate(members):
            ei = np.asarray(edge_indices[idx])
            adj[row, ei[0], ei[1]] = True
        dist = floyd_warshall(adj)
        for row, idx in enumerate(members):
            out[idx] = dist[row]
    return out  # type: ignore[return-value]


def shortest_paths(edge_index: np.ndarray, num_nodes: int) -> np.ndarray:
    """Shortest-path distances of one graph: ``[N, N]`` int16, ``-1`` where unreachable."""
    return floyd_warshall(_adjacency(np.asarray(edge_index), num_nodes)[None])[0]


def _store(data: Data, dist: np.ndarray) -> Data:
    # flattened to [N * N], so that PyG's default concatenation along dim 0 batches it
    data.spd = torch.from_numpy(dist.reshape(-1))
    return data


class AddShortestPaths(BaseTransform):
    """Adds all-pairs shortest-path hop counts as ``data.spd``.

    ``data.spd`` is int16 of shape ``[N * N]`` (row-major ``[N, N]``), ``-1`` for pairs in
    different fragments; the collator derives degrees and edge paths from it.

    For whole datasets :func:`add_shortest_paths` is several times faster.
    """

    def forward(self, data: Data) -> Data:
        """Adds ``spd`` to ``data`` (in place) and returns it."""
        return _store(data, shortest_paths(data.edge_index.numpy(), data.num_nodes))


def add_shortest_paths(graphs: Sequence[Data]) -> list[Data]:
    """Adds ``spd`` (see :class:`AddShortestPaths`) to many graphs at once, in place.

    Args:
        graphs: PyG graphs with ``edge_index`` and a node count.

    Returns:
        The same graphs, as a list.
    """
    dists = batched_shortest_paths(
        [g.edge_index.numpy() for g in graphs], [g.num_nodes for g in graphs]
    )
    return [_store(g, d) for g, d in zip(graphs, dists, strict=True)]
