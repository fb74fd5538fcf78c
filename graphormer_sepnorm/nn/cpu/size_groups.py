"""Groups of graphs of similar size, each padded only to its own largest graph.

Attention costs ``B * H * L^2`` on a batch padded to its largest graph (one 90-atom molecule
among 63 of 20-45 atoms: five times the real work), and mixes positions only within a graph, so
it runs per group; the keys cut away are padding, masked anyway. A dynamic program over the
sorted sizes trades the scores saved against a fixed cost per group.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

GROUP_OVERHEAD = 40_000
"""Cost of one more group, in score elements (``graphs * heads * L^2``) of attention work.

Measured on MolHIV and ZINC batches (``docs/results/cpu_training_speed.md``)."""


@dataclass
class SizeGroups:
    """How the graphs of a batch are grouped for attention.

    Attributes:
        order: permutation that sorts the graphs by size, or ``None`` when they already are.
        inverse: its inverse (``None`` with ``order``).
        counts: graphs per group, in sorted order.
        lengths: tokens ``1 + N_max`` of each group.
        length: tokens ``L`` of the whole batch.
        fused: attention runs in the fused C kernel
            (:mod:`~graphormer_sepnorm.nn.cpu.native.fused_attention`), which takes the group
            biases keys-first. Set by the CPU backend's encoder, once per batch.
    """

    order: Tensor | None
    inverse: Tensor | None
    counts: list[int]
    lengths: list[int]
    length: int
    fused: bool = False

    @classmethod
    def plan(cls, node_mask: Tensor, num_heads: int,
             overhead: float | None = None) -> SizeGroups | None:
        """Groups for a batch with ``node_mask`` ``[B, N]``; ``None`` when one group is best.

        Minimizes ``sum over groups (overhead + graphs * heads * L_group^2)`` over groups of
        consecutive graphs in size order (a dynamic program over the distinct sizes).
        ``overhead`` defaults to :data:`GROUP_OVERHEAD`.
        """
        if overhead is None:
            overhead = GROUP_OVERHEAD
        sizes = node_mask.sum(1)
        b, n = node_mask.shape
        if b < 2:
            return None
        sorted_sizes, order = torch.sort(sizes, stable=True)
        values, counts = torch.unique_consecutive(sorted_sizes, return_counts=True)
        values, counts = values.tolist(), counts.tolist()
        if len(values) < 2:
            return None
        # best[j]: cheapest grouping of the first j distinct sizes; cut[j]: where its last starts
        graphs_before = [0]
        for c in counts:
            graphs_before.append(graphs_before[-1] + c)
        best = [0.0] + [float("inf")] * len(values)
        cut = [0] * (len(values) + 1)
        for j in range(1, len(values) + 1):
            per_graph = num_heads * (1 + values[j - 1]) ** 2
            for i in range(j):
                cost = best[i] + overhead + (graphs_before[j] - graphs_before[i]) * per_graph
                if cost < best[j]:
                    best[j], cut[j] = cost, i
        bounds, j = [], len(values)
        while j > 0:
            bounds.append((cut[j], j))
            j = cut[j]
        if len(bounds) == 1:
            return None
        bounds.reverse()
        identity = torch.arange(b, device=order.device)
        is_sorted = bool(torch.equal(order, identity))
        inverse = None
        if not is_sorted:
            inverse = torch.empty_like(order)
            inverse[order] = identity
        return cls(
            order=None if is_sorted else order,
            inverse=inverse,
            counts=[graphs_before[j] - graphs_before[i] for i, j in bounds],
            lengths=[1 + values[j - 1] for _, j in bounds],
            length=1 + n,
        )

    @classmethod
    def whole(cls, batch_size: int, length: int) -> SizeGroups:
        """The whole batch as one group of ``length`` tokens (what ``plan``'s ``None`` means)."""
        return cls(order=None, inverse=None, counts=[batch_size], lengths=[length], length=length)

    def token_rows(self, device: torch.device | None = None) -> Tensor | None:
        """Rows of the ``[B * L]`` token grid that the groups keep, group after group.

        Each graph cut to its group's ``L_g`` tokens; ``None`` when nothing is cut. Graphs must
        be sorted (``order`` is ``None``).
        """
        if self.order is not None:
            raise ValueError("token rows are for a batch already sorted into its groups")
        if self.lengths == [self.length]:
            return None
        parts, first = [], 0
        for count, length in zip(self.counts, self.lengths, strict=True):
            graphs = torch.arange(first, first + count, device=device)
            parts.append((graphs[:, None] * self.length
                          + torch.arange(length, device=device)).flatten())
            first += count
        return torch.cat(parts)
