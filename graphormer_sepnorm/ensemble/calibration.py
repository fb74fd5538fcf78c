"""Calibrated predictive standard deviations, and the scores of them.

Split-conformal scaling, coverage, Gaussian NLL and the rank correlation of the deviations
with the errors. A model's raw deviations ``sigma`` (the GP's) rank molecules by how
uncertain they are, but their scale is not the blend's error's. :func:`conformal_scale`
finds, on held-out molecules (the validation split), the factor ``q`` for which
``|y - mean| <= q * sigma`` holds for 90% of them, with the finite-sample correction of
split-conformal prediction: on exchangeable new molecules the interval ``mean ± q * sigma``
then covers at least 90% (Lei et al., 2018, normalized residuals). The reported deviation is
``q * sigma / 1.645``, a Gaussian's whose 90% interval is that one.

Examples:
    >>> import torch
    >>> scores = torch.arange(1.0, 11.0)  # |y - mean| / sigma of 10 validation molecules
    >>> float(conformal_scale(scores, 0.9))  # the ceil(11 * 0.9) = 10th smallest
    10.0
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["Z90", "conformal_scale", "coverage", "gaussian_nll", "spearman",
           "std_error_spearman"]

#: The standard normal's 95% quantile; a Gaussian's 90% central interval is mean ± Z90 * std.
Z90 = 1.6448536269514722


def conformal_scale(scores: Tensor, level: float = 0.9) -> Tensor:
    """The split-conformal quantile of nonnegative scores ``[n]`` (NaN ignored).

    The ``ceil((n + 1) level)``-th smallest score; the largest when that exceeds ``n``.
    """
    scores = scores[~torch.isnan(scores)].sort().values
    if len(scores) == 0:
        return torch.tensor(float("nan"))
    rank = min(len(scores), math.ceil((len(scores) + 1) * level))
    return scores[rank - 1]


def _valid(*tensors: Tensor) -> Tensor:
    mask = torch.ones_like(tensors[0], dtype=torch.bool)
    for tensor in tensors:
        mask &= ~torch.isnan(tensor)
    return mask


def coverage(mean: Tensor, std: Tensor, y: Tensor, z: float = Z90) -> Tensor:
    """Share of targets within ``mean ± z * std`` (missing ones left out)."""
    mask = _valid(y, mean, std)
    return ((y - mean).abs()[mask] <= z * std[mask]).double().mean()


def gaussian_nll(mean: Tensor, std: Tensor, y: Tensor) -> Tensor:
    """Mean negative log-likelihood of ``y`` under ``Normal(mean, std)``."""
    mask = _valid(y, mean, std)
    var = std[mask].double().clamp_min(1e-12).square()
    return (0.5 * torch.log(2 * math.pi * var)
            + (y[mask].double() - mean[mask].double()).square() / (2 * var)).mean()


def _ranks(x: Tensor) -> Tensor:
    order = x.argsort()
    ranks = torch.empty_like(x, dtype=torch.float64)
    ranks[order] = torch.arange(len(x), dtype=torch.float64, device=x.device)
    return ranks


def spearman(a: Tensor, b: Tensor) -> Tensor:
    """Spearman's rank correlation of two vectors ``[n]`` (ties broken by position)."""
    ra, rb = _ranks(a), _ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return (ra * rb).sum() / (ra.square().sum() * rb.square().sum()).sqrt().clamp_min(1e-12)


def std_error_spearman(mean: Tensor, std: Tensor, y: Tensor) -> Tensor:
    """Spearman's correlation of ``std`` with ``|y - mean|``, averaged over targets ``[N, T]``."""
    values = []
    for t in range(y.shape[1]):
        mask = _valid(y[:, t], mean[:, t], std[:, t])
        if mask.sum() > 2:
            values.append(spearman(std[mask, t], (y[mask, t] - mean[mask, t]).abs()))
    return torch.stack(values).mean() if values else torch.tensor(float("nan"))
