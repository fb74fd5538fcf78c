"""Attention sequences: several molecules packed into each, a fixed ``[S, L]`` shape per fit.

A grid batch attends over ``[B, 1 + N]``, every molecule padded to the batch's (or the split's)
longest, and its attention bias ``[B, H, 1 + N, 1 + N]`` is read and differentiated by every
layer. MolHIV's training batches of 128 pad to 224 atoms for molecules of 25 on average, so
nearly all of that bias is padding. Here each molecule's tokens (graph token, then atoms) sit
contiguously in one of ``S`` sequences of ``L`` positions, and a block-diagonal bias keeps the
molecules apart (``-inf`` between them): the same attention, on a seventh of MolHIV's positions
and bias, and on 0.68 of ZINC-subset's positions (:func:`shape_for`; the few batches that need
more sequences swap molecules with other batches of their epoch, :func:`fit_epoch`).

The host chooses each batch's packing (:func:`pack`: longest-first into the least filled
sequence, about 0.1 ms for 256 molecules) and orders the batch's molecules by where they sit,
so each molecule's graph token position is increasing along the batch; the device works out
every map from those positions (:func:`sequence_maps`), with no count read back.
"""

from __future__ import annotations

import functools
import heapq
import os
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

#: Positions per sequence are a multiple of it: the fused attention kernel's bias alignment.
ALIGNMENT = 16
#: Whether ``train_tokens: sequences`` places batches in sequences, from
#: ``GRAPHORMER_SEPNORM_SEQUENCES`` when the package is imported (``0``: plain token rows, the
#: same function). Written 2026-11-28, not yet run on a GPU: a lease can turn them off alone
#: (``GRAPHORMER_SEPNORM_TOKEN_ROWS=0`` turns off rows and sequences).
ENABLED = os.environ.get("GRAPHORMER_SEPNORM_SEQUENCES", "1") != "0"


def shape_for(sizes: np.ndarray, batch_size: int, sigmas: float = 2.0, draws: int = 1000,
              seed: int = 0) -> tuple[int, int]:
    """``(S, L)`` for random batches of ``batch_size`` graphs of atom counts ``sizes``.

    ``L`` holds the largest molecule's tokens (rounded up to :data:`ALIGNMENT`). ``S``: the
    fewest sequences :func:`pack` fits each of ``draws`` random batches into, their mean plus
    ``sigmas`` standard deviations. The batches above it are made to fit by swapping molecules
    between an epoch's batches (:func:`fit_epoch`, :class:`.DeviceBatches`); one that still
    does not fit falls back to plain token rows, a second shape and a compile. ZINC-subset's
    batches of 256 need 136.4 sequences of 48 on average, with a standard deviation of 5.7:
    148, where 23 of 780 random batches (20 epochs) needed swaps and all got them (eight
    standard deviations, 182, left no batch out in 100,000 without swaps and cost 9% more
    bytes a step, ``benchmarks/README.md``). MolHIV's batches of 128 need 15.9 of 224.
    """
    length = -(-(int(sizes.max(initial=1)) + 1) // ALIGNMENT) * ALIGNMENT
    gen = np.random.default_rng(seed)
    batch_size = min(batch_size, len(sizes))
    needed = np.array([_fewest(sizes[gen.choice(len(sizes), batch_size, replace=False)] + 1,
                               length) for _ in range(draws)])
    count = int(np.ceil(needed.mean() + sigmas * needed.std()))
    return min(count, batch_size), length


def _fewest(tokens: np.ndarray, length: int) -> int:
    """The fewest sequences of ``length`` that :func:`pack` fits ``tokens`` into."""
    low, high = max(1, -(-int(tokens.sum()) // length)), len(tokens)
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if _least_filled(tokens, middle)[1] <= length \
            else (middle + 1, high)
    return low


def pack(tokens: np.ndarray, count: int, length: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Places molecules of ``tokens`` ``[B]`` tokens each into ``count`` sequences of ``length``.

    Returns the batch's order (a permutation of ``B``) and, in that order, each molecule's
    first position in the flattened ``[count, length]`` sequences (increasing); ``None`` where
    they do not fit.
    """
    sequence, fullest = _least_filled(tokens, count)
    if fullest > length:
        return None
    order = np.lexsort((np.arange(len(tokens)), sequence))
    ordered = tokens[order]
    ends = np.cumsum(ordered)
    firsts = np.searchsorted(sequence[order], np.arange(count))  # each sequence's first molecule
    offset_base = np.concatenate([[0], ends])[firsts]
    within = ends - ordered - offset_base[sequence[order]]
    return order, sequence[order] * length + within


def place(sizes: np.ndarray, batch: np.ndarray, count: int,
          length: int) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`pack` for each batch of ``batch`` ``[..., B]`` (graphs of atom counts ``sizes``).

    Returns the batches in their sequences' order and each graph token's first position, both
    ``[..., B]``; ``None`` where one of them does not fit.
    """
    rows = batch.reshape(-1, batch.shape[-1])
    placed = [pack(sizes[row] + 1, count, length) for row in rows]
    if any(p is None for p in placed):
        return None
    order = np.stack([row[p[0]] for row, p in zip(rows, placed, strict=True)])
    return order.reshape(batch.shape), np.stack([p[1] for p in placed]).reshape(batch.shape)


def fit_epoch(batches: list[list[int]], sizes: np.ndarray, count: int,
              length: int) -> list[list[int]]:
    """An epoch's batches, with molecules swapped between them until each batch fits.

    A batch that :func:`pack` cannot place in ``count`` sequences of ``length`` gives its
    largest molecule for the smallest of another batch (the next one in epoch order, wrapping
    round, that still fits after the swap), until it fits; one with no such partner is left as
    it is (it stays in plain rows). Every molecule stays in the epoch once and every batch keeps
    its size, so :func:`shape_for`'s margin need not cover the rare batch. The result depends
    on the epoch's batches alone: a fit resumed mid-epoch
    (:class:`~graphormer_sepnorm.data.resumable.ResumableBatchSampler`) swaps as the
    uninterrupted one did before it skips.

    Args:
        batches: the epoch's batches, graph indices into ``sizes``.
        sizes: atoms per graph.
        count: sequences per batch, ``S``.
        length: positions per sequence, ``L``.
    """
    tokens = np.asarray(sizes) + 1
    batches = [list(b) for b in batches]

    def fits(batch: list[int]) -> bool:
        return _least_filled(tokens[batch], count)[1] <= length

    for i, batch in enumerate(batches):
        for _ in range(len(batch)):
            if fits(batch):
                break
            large = max(range(len(batch)), key=lambda k: tokens[batch[k]])
            if not _give(batches, i, large, tokens, fits):
                break
    return batches


def _give(batches: list[list[int]], i: int, large: int, tokens: np.ndarray,
          fits: Callable[[list[int]], bool]) -> bool:
    """Swaps ``batches[i][large]`` for a smaller molecule of another batch that still fits."""
    for j in [*range(i + 1, len(batches)), *range(i)]:
        other = batches[j]
        small = min(range(len(other)), key=lambda k: tokens[other[k]])
        if tokens[other[small]] >= tokens[batches[i][large]]:
            continue
        trial = [*other[:small], batches[i][large], *other[small + 1:]]
        if fits(trial):
            batches[i][large], batches[j] = other[small], trial
            return True
    return False


def _least_filled(tokens: np.ndarray, count: int) -> tuple[np.ndarray, int]:
    """Longest first, each into the least filled of ``count`` sequences: (sequence, fullest).

    Remembered for the last batches seen: :class:`.DeviceBatches` places each batch that
    :func:`fit_epoch` has just checked (the returned array is read-only).
    """
    return _least_filled_of(np.ascontiguousarray(tokens, dtype=np.int64).tobytes(), count)


@functools.lru_cache(maxsize=4096)  # ZINC's epochs: 859 batches a replica
def _least_filled_of(key: bytes, count: int) -> tuple[np.ndarray, int]:
    tokens = np.frombuffer(key, dtype=np.int64)
    values = tokens.tolist()
    fill = [(0, s) for s in range(count)]
    sequence = [0] * len(values)
    fullest = 0
    for i in np.argsort(-tokens, kind="stable").tolist():
        used, s = fill[0]
        used += values[i]
        heapq.heapreplace(fill, (used, s))
        sequence[i] = s
        fullest = max(fullest, used)
    placed = np.array(sequence, dtype=np.int64)
    placed.setflags(write=False)
    return placed, fullest


def sequence_maps(num_nodes: Tensor, first: Tensor, count: int, length: int, atom_rows: int,
                  placed: tuple[Tensor, ...] | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """The sequence maps of graphs of ``num_nodes`` ``[..., B]`` atoms starting at ``first``.

    ``first`` ``[..., B]`` (increasing) is each graph token's position in the flattened
    ``[count, length]`` sequences, its atoms right after it. Rows are those of
    :func:`~graphormer_sepnorm.data.grid.row_maps` (``B`` graph tokens, then the atoms in
    graph order, then padding). Returns ``row_sequence`` ``[..., B + atom_rows]``,
    ``sequence_row`` and ``sequence_graph`` ``[..., count * length]``
    (:class:`~graphormer_sepnorm.data.collate.GraphormerBatch` says what they hold).
    ``placed``: :func:`positions_of` the same graphs, where the caller has it already.
    """
    b, positions = num_nodes.shape[-1], count * length
    graph, local, covered = placed or positions_of(num_nodes, first, positions)
    start = torch.cumsum(num_nodes, -1) - num_nodes  # each graph's first atom row, less B
    row = torch.where(local == 0, graph, b + start.gather(-1, graph) + local - 1)
    # padding positions point at rows spread out (see row_maps)
    position = torch.arange(positions, device=first.device)
    sequence_row = torch.where(covered, row, position % (b + atom_rows))
    return (row_positions(num_nodes, first, atom_rows, positions), sequence_row,
            torch.where(covered, graph, -1))


def row_positions(num_nodes: Tensor, first: Tensor, atom_rows: int, positions: int) -> Tensor:
    """Each token row's position, ``[..., B + atom_rows]``: graph tokens, atoms, padding rows.

    Graph ``g``'s token is at ``first[g]`` and its atoms right after it, among ``positions``;
    padding rows point at positions spread out (their gradients are zero, but a GPU adds them
    up with atomics, and thousands into one position would queue on it). The grid's rows
    (:func:`~graphormer_sepnorm.data.grid.row_maps`) and the sequences' (:func:`sequence_maps`).
    """
    b = num_nodes.shape[-1]
    end = torch.cumsum(num_nodes, -1)  # [..., B]: one past each graph's last atom row, less B
    start = end - num_nodes
    atom = torch.arange(atom_rows, device=first.device).expand(*num_nodes.shape[:-1], atom_rows)
    owner = torch.searchsorted(end, atom.contiguous(), right=True).clamp(max=b - 1)
    atom_position = torch.where(atom < end[..., -1:],
                                first.gather(-1, owner) + 1 + atom - start.gather(-1, owner),
                                (b + atom) % positions)
    return torch.cat([first, atom_position], -1)


def positions_of(num_nodes: Tensor, first: Tensor, positions: int) -> tuple[Tensor, ...]:
    """Each sequence position's graph, token (0: graph token, ``i``: atom ``i - 1``), realness.

    ``[..., positions]`` each; a padding position's graph and token are any in range.
    """
    position = torch.arange(positions, device=first.device).expand(*first.shape[:-1], positions)
    graph = (torch.searchsorted(first, position.contiguous(), right=True) - 1).clamp(min=0)
    local = position - first.gather(-1, graph)
    return graph, local, (local >= 0) & (local <= num_nodes.gather(-1, graph))


def sequence_pairs(store: dict[str, Tensor], index: Tensor, num_nodes: Tensor,
                   placed: tuple[Tensor, ...], count: int,
                   length: int) -> tuple[Tensor, Tensor]:
    """Each position pair's store pair and realness, ``[..., count, length, length]``.

    ``placed``: :func:`positions_of` the graphs. A pair is real where both positions are atoms
    of one graph; elsewhere its store pair is 0.
    """
    graph, local, covered = (t.view(*t.shape[:-1], count, length) for t in placed)
    atom = covered & (local > 0)
    same = graph.unsqueeze(-1) == graph.unsqueeze(-2)
    real = same & atom.unsqueeze(-1) & atom.unsqueeze(-2)
    n = num_nodes.gather(-1, graph.flatten(-2)).view(graph.shape)
    first_pair = store["pair_ptr"][index].gather(-1, graph.flatten(-2)).view(graph.shape)
    row = (first_pair + (local - 1) * n).unsqueeze(-1)
    return torch.where(real, row + (local - 1).unsqueeze(-2), 0), real
