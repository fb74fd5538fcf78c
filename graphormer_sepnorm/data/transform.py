"""Per-graph preprocessing for Graphormer as a PyG transform."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

from graphormer_sepnorm.data.shortest_paths import batched_shortest_paths, shortest_paths


def _store(data: Data, dist) -> Data:
    # Flattened to [N * N] so that PyG's default concatenation along dim 0 batches it.
    data.spd = torch.from_numpy(dist.reshape(-1))
    return data


class AddShortestPaths(BaseTransform):
    """Adds all-pairs shortest-path hop counts as ``data.spd``.

    ``data.spd`` is int16 of shape ``[N * N]`` (row-major ``[N, N]``), ``-1`` for pairs in
    different fragments. Degrees and the edges along each shortest path are derived from it in the
    collate step (:class:`~graphormer_sepnorm.data.collate.GraphormerCollator`), so the cached
    dataset holds only ``N^2`` small integers per graph.

    For whole datasets prefer :func:`add_shortest_paths`, which groups graphs by size and is
    several times faster than applying this transform graph by graph.
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
