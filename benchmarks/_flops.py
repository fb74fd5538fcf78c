"""Analytic matmul FLOPs of the Graphormer encoder and a ``torch.mm`` reference speed."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch


def layer_flops(graphs: int, atoms: int, dim: int = 80, ffn_dim: int = 80,
                queries: int | None = None,
                groups: Sequence[tuple[int, int]] | None = None) -> int:
    """Multiply-add FLOPs (2 per MAC) of one encoder layer on a padded batch.

    Counts the q/k/v projection (all ``L = 1 + atoms`` tokens: keys and values are always
    needed), the attention scores and probabilities-times-values (``H * head_dim = dim``), the
    output projection and the two FFN matrices. Norms, softmax, biases and embeddings are left
    out: they are not matmuls.

    Args:
        graphs: ``B``.
        atoms: ``N``, the padded atom count of the batch.
        dim: hidden size ``D``. Default: 80.
        ffn_dim: FFN hidden size. Default: 80.
        queries: positions that attend and go through the FFN; default all ``L``. The model's
            ``forward`` runs its last layer for the graph token only (``queries=1``).
        groups: ``(graphs, tokens)`` of each group when attention runs per group of
            similar-sized graphs (``SizeGroups``): the q/k/v and output projections and the
            attention are then counted on each group's own length, as they run; the FFN on
            the padded batch. Ignored with ``queries``.
    """
    length = 1 + atoms
    if groups is not None and queries is None:
        ffn = 2 * graphs * length * 2 * dim * ffn_dim
        return ffn + sum(2 * b * n * dim * 4 * dim + 2 * 2 * b * n * n * dim for b, n in groups)
    queries = length if queries is None else queries
    qkv = 2 * graphs * length * dim * 3 * dim
    attention = 2 * 2 * graphs * queries * length * dim  # scores, then probs @ values
    out_and_ffn = 2 * graphs * queries * (dim * dim + 2 * dim * ffn_dim)
    return qkv + attention + out_and_ffn


def model_flops(graphs: int, atoms: int, num_layers: int = 12,
                groups: Sequence[tuple[int, int]] | None = None) -> int:
    """Forward FLOPs of ``Graphormer.forward``: all layers full except the last (graph token).

    ``groups``: see :func:`layer_flops`.
    """
    return ((num_layers - 1) * layer_flops(graphs, atoms, groups=groups)
            + layer_flops(graphs, atoms, queries=1))


class MatmulProbe:
    """A ``torch.mm`` reference timed in short bursts between the model's steps.

    The machine's speed drifts (the same matmul measured 40 to 83 GFLOP/s in runs minutes
    apart), so a reference timed once, before or after the model, can land in another phase
    than the model's steps. Called after each step with the step's graphs, the probe times
    ``calls`` products ``[rows, inner] x [inner, cols]``, ``rows`` the step's padded tokens:
    the reference then sees the same phases, and the same shapes, as the model.

    Args:
        rows_of: padded tokens ``B * (1 + N)`` of a step, from its graph indices.
        inner: Default: 80 (the hidden size).
        cols: Default: 240 (the QKV projection).
        calls: products per burst. Default: 3.
    """

    def __init__(self, rows_of: Callable[[list[int]], int], inner: int = 80, cols: int = 240,
                 calls: int = 3) -> None:
        self.rows_of, self.inner, self.cols, self.calls = rows_of, inner, cols, calls
        self.flops = self.seconds = 0.0
        self.bursts = 0
        self._operands: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def __call__(self, indices: list[int]) -> None:
        """Times one burst for a step over graphs ``indices``."""
        rows = self.rows_of(indices)
        if rows not in self._operands:
            self._operands[rows] = (torch.randn(rows, self.inner),
                                    torch.randn(self.inner, self.cols),
                                    torch.empty(rows, self.cols))
        a, b, out = self._operands[rows]
        torch.mm(a, b, out=out)  # warm: the model's step just ran through the caches
        start = time.perf_counter()
        for _ in range(self.calls):
            torch.mm(a, b, out=out)
        self.seconds += time.perf_counter() - start
        self.flops += 2 * rows * self.inner * self.cols * self.calls
        self.bursts += 1

    @property
    def gflops(self) -> float:
        """GFLOP/s over all bursts so far."""
        return self.flops / self.seconds / 1e9
