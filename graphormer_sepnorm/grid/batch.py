"""The grid engine's batch: every position of the padded grid, so shapes depend on ``B``, ``N``.

The collator's :class:`~graphormer_sepnorm.data.collate.GraphormerBatch` holds only what is
real (the atoms, the pairs of each graph, the hops of each path), so its shapes change with every
batch. A :class:`GridBatch` holds every position of the padded ``[B, N]`` grid and every pair
of ``[B, N, N]``, and ``S`` hop slots per pair, so that a compiled step (or a CUDA graph) is
built once per shape. It implements the three layout methods the model reads
(:meth:`GridBatch.atom_grid`, :meth:`GridBatch.with_pairs`, :meth:`GridBatch.hop_sums`), so the
reference model computes the same function from either batch of the same graphs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor

from graphormer_sepnorm.data.collate import TensorFields


@dataclass
class GridBatch(TensorFields):
    """``B`` graphs padded to ``N`` atoms, with every position and pair of the grid.

    Attributes:
        x: ``[B * N, F_node]`` long atom features, padding included.
        degree: ``[B * N]`` long degrees.
        node_mask: ``[B, N]`` bool, true for real atoms.
        edge_attr: ``[E_types, F_edge]`` long: one row per edge *type* of the store.
        pair_spd: ``[B * N * N]`` hop distance of every pair of the grid, in order (padded
            pairs 0, unreachable ones ``-1``); the store's small integer type.
        hop_index: ``[B * N * N, S]``: slot ``s`` of a pair is hop ``s`` (an expanded
            ``arange(S)``, no memory of its own).
        hop_edge: ``[B * N * N, S]``: the edge type (row of ``edge_attr``) at each hop of the
            pair's path; slots at or past the pair's distance are read by nothing.
        y: ``[B, num_tasks]`` float targets, or ``None``.
        mol_x: ``[B, F_mol]`` float molecule features, or ``None``.
        stacked: every field has a leading ``[R]``: one batch per packed replica
            (:class:`~graphormer_sepnorm.training.packed.PackedReplicas` maps over it).
    """

    x: Tensor
    degree: Tensor
    node_mask: Tensor
    edge_attr: Tensor
    pair_spd: Tensor
    hop_index: Tensor
    hop_edge: Tensor
    y: Tensor | None = None
    mol_x: Tensor | None = None
    stacked: bool = False

    @property
    def num_graphs(self) -> int:
        """Number of graphs ``B``."""
        return self.node_mask.shape[-2]

    def atom_grid(self, atoms: Tensor) -> Tensor:
        """Per-position rows ``[B * N, D]`` as the grid ``[B, N, D]``.

        Padded positions hold what the padding's features embed to: no real token attends to
        them, so no output depends on them.
        """
        b, n = self.node_mask.shape
        return atoms.view(b, n, -1)

    def with_pairs(self, bias: Tensor, pair: Tensor) -> Tensor:
        """``bias`` ``[B, H, 1 + N, 1 + N]`` plus every pair's ``[B * N * N, H]`` values.

        Out of place, so that it runs under ``vmap`` (packed replicas).
        """
        b, n = self.node_mask.shape
        return bias + F.pad(pair.view(b, n, n, -1).permute(0, 3, 1, 2), (1, 0, 1, 0))

    def hop_sums(self, table: Tensor, hops: int) -> Tensor:
        """Each pair's sum over its first ``min(d, hops)`` slots, ``[B * N * N, H]``.

        ``table`` ``[hops * E_types, H]`` is hop-major: hop ``k`` over edge type ``e`` reads
        row ``k * E_types + e``. The slots are gathered and summed per pair (``vmap`` batches
        that; it has no rule for ``embedding_bag``).
        """
        slots = min(hops, self.hop_edge.shape[-1])
        hop = self.hop_index[:, :slots]
        rows = hop.int() * len(self.edge_attr) + self.hop_edge[:, :slots].int()  # int32 saved
        kept = hop < self.pair_spd.clamp(min=0, max=hops).unsqueeze(-1)
        return (F.embedding(rows, table) * kept.unsqueeze(-1).to(table.dtype)).sum(1)
