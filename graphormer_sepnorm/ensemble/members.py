"""Several models' predictions as one: their mean, their spread, and calibrated intervals.

What an ensemble of fits (seeds, cross-validation folds, packed replicas) predicts with; the
members are loaded and calibrated by :mod:`graphormer_sepnorm.prediction.ensembles`. Torch only.

- :func:`combine`: the members' mean, their spread (a ``<column>_std`` for every prediction
  column), and the total deviation of a regression mixture (law of total variance over the
  members' own deviations, their GP blends');
- :class:`Calibration`: a regression ensemble's 90% interval, split-conformal on a shared
  validation split (its mean and total deviation, as a blend calibrates) or CV+ (Barber et
  al., 2021) on the out-of-fold residuals of folds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

__all__ = ["Calibration", "combine"]


def combine(outputs: Sequence[tuple[Tensor, Tensor | None]]) -> tuple[Tensor, Tensor, Tensor]:
    """The members' mean ``[B, C]``, their spread ``[B, C]``, and the total deviation ``[B, C]``.

    The total is ``sqrt(mean of the members' variances + variance of their means)``, a member
    without deviations counting 0 (the law of total variance: the mixture's deviation). The
    spread is the population standard deviation (0 for one member).
    """
    means = torch.stack([m.double() for m, _ in outputs])
    spread = means.std(0, correction=0)
    own = [s.double().square() if s is not None else torch.zeros_like(m, dtype=torch.float64)
           for m, s in outputs]
    total = (torch.stack(own).mean(0) + spread.square()).sqrt()
    return means.mean(0), spread, total


@dataclass
class Calibration:
    """A regression ensemble's 90% intervals, calibrated on held-out molecules.

    Attributes:
        kind: ``'split'`` (split-conformal on a shared validation split) or ``'cv+'``.
        q90: ``'split'``: per target, the factor of the total deviation.
        residuals: ``'cv+'``: per member, the absolute out-of-fold residuals ``[n_k, T]`` of
            the molecules it tested (NaN where unlabelled).
        note: what it was calibrated on, in words.
    """

    kind: str
    q90: list[float] = field(default_factory=list)
    residuals: list[Tensor] = field(default_factory=list)
    note: str = ""

    def interval(self, means: Tensor, total: Tensor) -> tuple[Tensor, Tensor]:
        """``lo90, hi90`` ``[B, T]`` from the members' means ``[K, B, T]`` and total ``[B, T]``."""
        if self.kind == "split":
            q = torch.tensor(self.q90, dtype=total.dtype, device=total.device)
            center = means.mean(0)
            return center - q * total, center + q * total
        return _cv_plus(means, self.residuals)


def _cv_plus(means: Tensor, residuals: Sequence[Tensor], alpha: float = 0.1
             ) -> tuple[Tensor, Tensor]:
    """CV+: quantiles over held-out molecules ``i`` of ``mu_k(i)(x) -/+ R_i``, per target."""
    lo = torch.full(means.shape[1:], math.nan, dtype=means.dtype)
    hi = lo.clone()
    for t in range(means.shape[2]):
        low, high = [], []
        for k, r in enumerate(residuals):
            r_t = r[:, t][~r[:, t].isnan()].to(means.dtype)
            low.append(means[k, :, t, None] - r_t)
            high.append(means[k, :, t, None] + r_t)
        low_t, high_t = torch.cat(low, 1), torch.cat(high, 1)
        n = low_t.shape[1]
        if n == 0:
            continue
        k_lo = max(1, math.floor(alpha * (n + 1)))
        k_hi = min(n, math.ceil((1 - alpha) * (n + 1)))
        lo[:, t] = low_t.sort(1).values[:, k_lo - 1]
        hi[:, t] = high_t.sort(1).values[:, k_hi - 1]
    return lo, hi
