"""The batches the model reads: the collator's :class:`GraphormerBatch` and :class:`GridBatch`.

Both have the layout methods ``atom_grid``, ``with_pairs`` and ``hop_sums``, the model's only
reads of a batch's layout, so the model computes the same function from either. The collator's
holds only what is real (shapes change every batch); the grid batch every position and pair of
the padded grid (shapes depend on ``B``, ``N`` and ``S`` only).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["GraphormerBatch", "GridBatch", "TensorFields", "as_long_2d"]

_Batch = TypeVar("_Batch", bound="TensorFields")


def as_long_2d(t: Tensor) -> Tensor:
    """``t`` as a long ``[rows, columns]`` tensor: a ``[rows]`` one becomes ``[rows, 1]``."""
    return (t.unsqueeze(-1) if t.dim() == 1 else t).long()


class TensorFields:
    """A dataclass batch whose tensor fields move together; its other fields are kept."""

    def to(self: _Batch, device: torch.device | str, non_blocking: bool = False) -> _Batch:
        """Returns a copy with every tensor moved to ``device``."""
        return self._map(lambda v: v.to(device, non_blocking=non_blocking))

    def _map(self: _Batch, move: Callable[[Tensor], Tensor]) -> _Batch:
        """A copy with ``move`` applied to every tensor field."""
        return replace(self, **{f.name: move(v) for f in fields(self)
                                if isinstance(v := getattr(self, f.name), Tensor)})


@dataclass
class GraphormerBatch(TensorFields):
    """A batch of ``B`` graphs padded to ``N`` nodes (position 0 is left for the graph token).

    Attributes:
        x: ``[T, F_node]`` long atom features of the ``T`` atoms of the batch.
        degree: ``[T]`` long in-degree of each atom.
        node_slot: ``[T]`` long position of each atom in the flattened ``[B, N]`` grid.
        node_mask: ``[B, N]`` bool, true for real atoms.
        edge_attr: ``[E, F_edge]`` long features of the batch's directed edges.
        pair_slot: ``[P]`` long position of each real pair ``(i, j)`` in the flattened
            ``[B, N, N]`` grid.
        pair_spd: ``[P]`` long hop distance of each pair, ``-1`` when unreachable.
        hop_pair: ``[M]`` long: for each hop of each kept shortest path, its pair (index into
            the ``P`` pairs). A pair at distance ``d`` has ``min(d, K)`` hops.
        hop_index: ``[M]`` long: which hop it is, 0 for the edge next to ``i``.
        hop_edge: ``[M]`` long: the edge taken at that hop (row of ``edge_attr``).
        y: ``[B, num_tasks]`` float targets, or ``None``.
        mol_x: ``[B, F_mol]`` float molecule features the head reads beside the graph token
            (``graphormer_sepnorm.chem.mol_features``), or ``None``.
        hop_counts: when the hop lists are hop-major with nested pair prefixes (the
            collator's): ``hop_counts[k]`` hops have index ``k``, after those of ``k - 1``, and
            belong to the first ``hop_counts[k]`` pairs of hop 0's. Else ``None``. Plain ints.
    """

    x: Tensor
    degree: Tensor
    node_slot: Tensor
    node_mask: Tensor
    edge_attr: Tensor
    pair_slot: Tensor
    pair_spd: Tensor
    hop_pair: Tensor
    hop_index: Tensor
    hop_edge: Tensor
    y: Tensor | None = None
    mol_x: Tensor | None = None
    hop_counts: tuple[int, ...] | None = None

    @property
    def num_graphs(self) -> int:
        """Number of graphs ``B``."""
        return self.node_mask.shape[0]

    def atom_grid(self, atoms: Tensor) -> Tensor:
        """Per-atom rows ``[T, D]`` placed in the padded grid ``[B, N, D]``, zero at padding."""
        b, n = self.node_mask.shape
        grid = atoms.new_zeros(b * n, atoms.shape[1]).index_copy(0, self.node_slot, atoms)
        return grid.view(b, n, -1)

    def with_pairs(self, bias: Tensor, pair: Tensor) -> Tensor:
        """``bias`` ``[B, H, 1 + N, 1 + N]`` with each real pair's ``[P, H]`` values written in.

        Pair ``(i, j)`` of graph ``g`` goes to ``bias[g, :, 1 + i, 1 + j]`` (in place).
        """
        n = self.node_mask.shape[1]
        slot = self.pair_slot
        graph, i, j = slot // (n * n), slot // n % n + 1, slot % n + 1
        bias[graph, :, i, j] = pair
        return bias

    def hop_sums(self, table: Tensor, hops: int) -> Tensor:
        """Each pair's sum over the first ``min(d, hops)`` hops of its path, ``[P, H]``.

        ``table`` ``[hops * E, H]``: hop ``k`` over edge ``e`` reads row ``k * E + e``.
        """
        kept = (self.hop_index < hops).unsqueeze(1).to(table.dtype)
        rows = self.hop_index.clamp(max=hops - 1) * len(self.edge_attr) + self.hop_edge
        return table.new_zeros(len(self.pair_spd), table.shape[1]).index_add(
            0, self.hop_pair, table[rows] * kept)

    def pin_memory(self) -> GraphormerBatch:
        """Pins every tensor (used by ``DataLoader(pin_memory=True)``)."""
        return self._map(lambda v: v.pin_memory())


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
        """Per-position rows ``[B * N, D]`` as the grid ``[B, N, D]`` (padding read by none)."""
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

        ``table`` ``[hops * E_types, H]``: hop ``k`` over edge type ``e`` reads row
        ``k * E_types + e``.
        """
        slots = min(hops, self.hop_edge.shape[-1])
        hop = self.hop_index[:, :slots]
        rows = hop.int() * len(self.edge_attr) + self.hop_edge[:, :slots].int()  # int32 saved
        kept = hop < self.pair_spd.clamp(min=0, max=hops).unsqueeze(-1)
        return (F.embedding(rows, table) * kept.unsqueeze(-1).to(table.dtype)).sum(1)
