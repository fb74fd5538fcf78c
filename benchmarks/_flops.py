"""Analytic matmul FLOPs of the Graphormer encoder and a ``torch.mm`` reference speed."""

from __future__ import annotations

import time
from collections.abc import Sequence

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


def matmul_gflops(rows: int, inner: int, cols: int, seconds: float = 0.5) -> float:
    """GFLOP/s of ``torch.mm([rows, inner], [inner, cols])`` under the current thread setting."""
    a, b = torch.randn(rows, inner), torch.randn(inner, cols)
    out = torch.empty(rows, cols)
    for _ in range(3):  # warm-up
        torch.mm(a, b, out=out)
    reps, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        torch.mm(a, b, out=out)
        reps += 1
    return 2 * rows * inner * cols * reps / elapsed / 1e9
