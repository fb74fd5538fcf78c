"""Tanimoto (MinMax) similarity of count fingerprints: the fingerprint GP's kernel.

``sim(a, b) = sum(min(a, b)) / sum(max(a, b))`` over the bits, for non-negative vectors.
:func:`minmax_similarity` computes it for any such vectors; :func:`log_count_tanimoto` for
the head's Morgan features, ``log1p`` of integer counts, as a few matrix products instead of
an L1 distance matrix (5-10x faster; the prediction of a default small-data model spent a
third of its main-process time in the kernel).

Examples:
    >>> import torch
    >>> counts = torch.tensor([[2.0, 0.0, 1.0], [1.0, 1.0, 1.0]])
    >>> x = torch.log1p(counts)
    >>> torch.allclose(log_count_tanimoto(x, x), minmax_similarity(x, x))
    True
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["log_count_tanimoto", "minmax_similarity"]


def minmax_similarity(a: Tensor, b: Tensor, rows: int = 32) -> Tensor:
    """Tanimoto similarity of non-negative count vectors ``[P, F]``, ``[Q, F]`` -> ``[P, Q]``.

    ``sum(min) = (|a| + |b| - |a - b|) / 2`` and ``sum(max) = |a| + |b| - sum(min)``: one L1
    distance matrix instead of a ``[P, Q, F]`` tensor, over the columns where both sides have
    a nonzero count (elsewhere every minimum is 0), ``rows`` of ``a`` at a time: a few hundred of
    2,048 Morgan bits, 3-10x faster than all of them. Two empty vectors are
    identical (1).
    """
    if len(a) > rows:
        return torch.cat([minmax_similarity(part, b, rows) for part in a.split(rows)])
    shared = (a > 0).any(0) & (b > 0).any(0)
    a_shared, b_shared = a[:, shared], b[:, shared]
    minima = (a_shared.sum(1, keepdim=True) + b_shared.sum(1)[None]
              - torch.cdist(a_shared, b_shared, p=1.0)) / 2
    total = a.sum(1, keepdim=True) + b.sum(1)[None]
    return torch.where(total > 0, minima / (total - minima).clamp_min(1e-12), 1.0)


def _counts(x: Tensor) -> Tensor:
    """Integer counts (as float32) from their ``log1p`` values, float16 ones included.

    float16 keeps 11 bits: counts up to about 100 come back exact, larger ones within 1.
    """
    return torch.expm1(x.float()).round_().clamp_min_(0)


def log_count_tanimoto(a: Tensor, b: Tensor) -> Tensor:
    """:func:`minmax_similarity` of ``log1p`` integer counts ``[P, F]``, ``[Q, F]`` -> ``[P, Q]``.

    ``log1p`` is increasing, so ``min(log1p i, log1p j) = sum_{k <= min(i, j)} w_k`` with
    ``w_k = log1p(k) - log1p(k - 1)``: the sum of the minima is ``sum_k w_k [a >= k] . [b >= k]``,
    one 0/1 matrix product per count level ``k``, over the bits where both sides reach it
    (level 1 holds most of them; few bits count more than 3). Values are those of the counts
    the inputs round to (see ``_counts``), in float64 for float64 inputs, else float32.
    """
    count_a, count_b = _counts(a), _counts(b)
    dtype = torch.float64 if a.dtype == torch.float64 else torch.float32
    top = torch.minimum(count_a.amax(0), count_b.amax(0))  # the highest level both reach, per bit
    levels = int(top.max()) if top.numel() else 0
    weights = torch.log1p(torch.arange(levels + 1, dtype=torch.float64)).diff().tolist()
    minima = torch.zeros(len(a), len(b), dtype=dtype, device=a.device)
    for level, weight in enumerate(weights, 1):
        bits = (top >= level).nonzero()[:, 0]
        reach_a = (count_a.index_select(1, bits) >= level).to(dtype)
        reach_b = (count_b.index_select(1, bits) >= level).to(dtype)
        minima.addmm_(reach_a, reach_b.T, alpha=weight)
    total = (torch.log1p(count_a.to(dtype)).sum(1, keepdim=True)
             + torch.log1p(count_b.to(dtype)).sum(1)[None])
    return torch.where(total > 0, minima / (total - minima).clamp_min(1e-12), 1.0)
