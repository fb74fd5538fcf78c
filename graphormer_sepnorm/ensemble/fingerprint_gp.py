"""A Gaussian process on the molecule features, blended with the network on small data.

On a few hundred to a few thousand molecules, an exact GP with a Tanimoto kernel on Morgan counts
is the classic strong baseline (GAUCHE, FlowMO), and its errors differ from a fine-tuned
network's: on our five small sets their mean beat both on the two physical properties and the
network alone on all five (README "Small data"). The GP reads the molecule features the head
already gets (``mol_x``), so prediction needs nothing more.

Kernel, per target: ``a * minmax(morgan, morgan') + b * exp(-|d - d'|^2 / (2 l^2 F_d)) + s I``,
``minmax`` the Tanimoto (MinMax) similarity of the head's ``log1p`` Morgan counts (sum of minima
over sum of maxima), ``d`` the 174 standardized RDKit descriptors (``F_d`` of them). ``a, b, l,
s`` maximize the marginal likelihood of the standardized training targets. A term is absent when
its features are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from graphormer_sepnorm.chem.layout import DESCRIPTOR_FEATURES, feature_columns
from graphormer_sepnorm.ensemble.tanimoto import log_count_tanimoto, minmax_similarity

__all__ = ["KERNEL_FEATURES", "FingerprintGP", "gp_columns", "minmax_similarity"]

KERNEL_FEATURES = ("morgan", "rdkit2d")


def gp_columns(featurizer: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """Column ranges ``(start, stop)`` of the GP's features within ``mol_x``.

    Read from a featurizer's config (``dataset_info['featurizer']``): its record of them,
    ``mol_feature_columns``, or, in configs written before it had one, the layout of its
    ``mol_features`` names (no RDKit either way). Empty without Morgan counts or descriptors.
    The descriptor feature (``rdkit2d``) is the ``rdkit2d`` kernel's.
    """
    columns = featurizer.get("mol_feature_columns")
    if columns is None:
        columns = feature_columns(featurizer.get("mol_features", []))
    kernels = {"rdkit2d" if name in DESCRIPTOR_FEATURES else name: c
               for name, c in columns.items()}
    return {name: (int(c[0]), int(c[1])) for name, c in kernels.items()
            if name in KERNEL_FEATURES}


class FingerprintGP(nn.Module):
    """Exact GP regression on molecule features; unfitted (empty) until :meth:`fit`.

    Args:
        slices: ``{'morgan' | 'rdkit2d': (start, stop)}`` columns of ``mol_x`` (see
            :func:`gp_columns`); at least one.
        num_targets: ``T``, one GP (its own hyperparameters) per target.

    Buffers (saved in checkpoints, resized on load): ``train_x [N, F_gp]`` float16 training
    features, ``alpha [N, T]`` dual weights (0 where a target is missing), ``hyper [T, 4]``
    (``a, b, l, s``), ``y_mean``/``y_std [T]``, and for :meth:`predict`'s uncertainty
    ``present [N, T]`` (which targets each training molecule has) and ``loo_sq [N, T]``, each
    training molecule's squared leave-one-out residual (standardized units; empty in GPs
    saved before they existed, which then give no uncertainty).
    """

    def __init__(self, slices: dict[str, tuple[int, int]], num_targets: int) -> None:
        super().__init__()
        if not slices or set(slices) - set(KERNEL_FEATURES):
            raise ValueError(f"FingerprintGP needs features among {KERNEL_FEATURES}, got "
                             f"{sorted(slices)}")
        self.slices = dict(slices)
        width = sum(stop - start for start, stop in self.slices.values())
        self.register_buffer("train_x", torch.zeros(0, width, dtype=torch.float16))
        self.register_buffer("alpha", torch.zeros(0, num_targets))
        self.register_buffer("hyper", torch.zeros(num_targets, 4))
        self.register_buffer("y_mean", torch.zeros(num_targets))
        self.register_buffer("y_std", torch.ones(num_targets))
        self.register_buffer("present", torch.zeros(0, num_targets, dtype=torch.bool))
        self.register_buffer("loo_sq", torch.zeros(0, num_targets))
        self._chol: dict[int, Tensor] = {}  # per target, rebuilt from the buffers when needed

    @property
    def fitted(self) -> bool:
        """Whether :meth:`fit` has run (or fitted buffers were loaded)."""
        return self.train_x.shape[0] > 0

    @property
    def has_std(self) -> bool:
        """Whether :meth:`predict` gives a standard deviation (fitted by this version)."""
        return self.fitted and self.loo_sq.shape[0] == self.train_x.shape[0]

    def _select(self, mol_x: Tensor) -> Tensor:
        return torch.cat([mol_x[:, start:stop] for start, stop in self.slices.values()], 1)

    def _parts(self, x: Tensor, train: Tensor) -> tuple[Tensor | None, Tensor | None]:
        """The Tanimoto ``[P, N]`` and mean squared descriptor distance ``[P, N]`` (or None)."""
        tanimoto = sqdist = None
        offset = 0
        for name, (start, stop) in self.slices.items():
            cols = slice(offset, offset + stop - start)
            offset += stop - start
            if name == "morgan":
                tanimoto = log_count_tanimoto(x[:, cols], train[:, cols])
            else:
                sqdist = torch.cdist(x[:, cols], train[:, cols]).square() / (stop - start)
        return tanimoto, sqdist

    @staticmethod
    def _kernel(parts: tuple[Tensor | None, Tensor | None], hyper: Tensor) -> Tensor:
        tanimoto, sqdist = parts
        kernel = 0.0
        if tanimoto is not None:
            kernel = hyper[0] * tanimoto
        if sqdist is not None:
            kernel = kernel + hyper[1] * torch.exp(-sqdist / (2 * hyper[2] ** 2))
        return kernel

    def fit(self, mol_x: Tensor, y: Tensor, steps: int = 150, lr: float = 0.05,
            evidence_rows: int | None = None) -> None:
        """Fits each target's hyperparameters (Adam on the marginal likelihood) and weights.

        Args:
            mol_x: ``[N, F_mol]`` training molecules' features.
            y: ``[N, T]`` targets in their units; NaN where missing.
            steps: Adam steps on the negative log marginal likelihood. Default: 150.
            lr: Adam's learning rate (on log hyperparameters). Default: 0.05.
            evidence_rows: the hyperparameters maximize the marginal likelihood of at most this
                many of a target's molecules (a fixed random subset, seed 0; ``None``: all);
                the weights and leave-one-out residuals are always solved on all. Each Adam
                step costs a Cholesky and an inverse, ``N^3``: 1.5 CPU s at ``N`` = 2,925.
        """
        train = self._select(mol_x.float()).to(torch.float16)
        x = train.double()
        parts = self._parts(x, x)
        alpha = torch.zeros(len(x), y.shape[1], dtype=torch.float64)
        loo_sq = torch.zeros_like(alpha)
        hypers, means, stds = [], [], []
        for t in range(y.shape[1]):
            rows = ~torch.isnan(y[:, t])
            target = y[rows, t].double()
            mean, std = target.mean(), target.std().clamp_min(1e-12)
            z = (target - mean) / std
            sub = tuple(p[rows][:, rows] if p is not None else None for p in parts)
            pick = _subset(len(z), evidence_rows)
            hyper = _maximize_evidence(
                tuple(p[pick][:, pick] if p is not None else None for p in sub), z[pick],
                steps, lr)
            alpha[rows, t], loo_sq[rows, t] = _solve(self._kernel(sub, hyper), hyper[3], z)
            hypers.append(hyper)
            means.append(mean)
            stds.append(std)
        self.present = (~torch.isnan(y)).to(self.train_x.device)
        self.loo_sq = loo_sq.float().to(self.train_x.device)
        self._chol = {}
        self.train_x = train.to(self.train_x.device)
        self.alpha = alpha.float().to(self.train_x.device)
        self.hyper = torch.stack(hypers).float().to(self.train_x.device)
        self.y_mean = torch.stack(means).float().to(self.train_x.device)
        self.y_std = torch.stack(stds).float().to(self.train_x.device)

    def forward(self, mol_x: Tensor) -> Tensor:
        """Posterior means ``[B, T]`` in the targets' units for features ``mol_x [B, F_mol]``."""
        return self.predict(mol_x, with_std=False)[0]

    def predict(self, mol_x: Tensor, with_std: bool = True) -> tuple[Tensor, Tensor | None]:
        """Posterior means and standard deviations ``[B, T]`` in the targets' units.

        The variance of a prediction is the GP's own for the function at ``x`` (large for a
        molecule unlike the training ones) plus the noise around ``x``: the leave-one-out
        squared residuals of the training molecules, averaged with the kernel's weights (larger
        where similar training molecules were predicted badly from the others). Its scale is
        calibrated afterwards (:class:`~graphormer_sepnorm.ensemble.blend.BlendedModel`).
        ``None`` instead of the deviations without ``with_std`` or :attr:`has_std`.
        """
        # float32 whatever the module was cast to (bf16-true casts buffers too)
        parts = self._parts(self._select(mol_x.float()), self.train_x.float())
        alpha, hyper = self.alpha.float(), self.hyper.float()
        means, stds = [], []
        for t, h in enumerate(hyper):
            kernel = self._kernel(parts, h)
            means.append(kernel @ alpha[:, t])
            if with_std and self.has_std:
                stds.append(self._std(kernel, t, h))
        scale, shift = self.y_std.float(), self.y_mean.float()
        mean = torch.stack(means, 1) * scale + shift
        return mean, torch.stack(stds, 1) * scale if stds else None

    def _std(self, kernel: Tensor, t: int, hyper: Tensor) -> Tensor:
        """One target's predictive standard deviation ``[B]`` (standardized units)."""
        latent, noise = self.variance_parts(kernel, t, hyper)
        return (latent + noise).sqrt().float()

    def variance_parts(self, kernel: Tensor, t: int, hyper: Tensor) -> tuple[Tensor, Tensor]:
        """One target's latent and noise variances ``[B]``, float64, standardized units.

        Args:
            kernel: ``[B, N]`` kernel of the molecules against the training ones.
            t: the target.
            hyper: its hyperparameters.
        """
        rows = self.present[:, t]
        k = kernel[:, rows].double()
        if t not in self._chol:
            train = self.train_x[rows].double()
            cov = self._kernel(self._parts(train, train), hyper.double())
            self._chol[t] = torch.linalg.cholesky(
                cov + (hyper[3].double() + 1e-6) * torch.eye(len(train), dtype=cov.dtype,
                                                             device=cov.device))
        solved = torch.linalg.solve_triangular(self._chol[t], k.T, upper=False)
        prior = sum(float(hyper[i]) for i, name in ((0, "morgan"), (1, "rdkit2d"))
                    if name in self.slices)
        latent = (prior - solved.square().sum(0)).clamp_min(0.0)
        weights = k.clamp_min(0.0)
        noise = (weights @ self.loo_sq[rows, t].double()) / weights.sum(1).clamp_min(1e-12)
        return latent, noise

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any,
                              **kwargs: Any) -> None:
        # fitted buffers have the training set's size: take the checkpoint's shapes
        for name in ("train_x", "alpha", "present", "loo_sq"):
            saved = state_dict.get(prefix + name)
            if saved is not None:
                setattr(self, name, torch.empty_like(saved, device=getattr(self, name).device))
        self._chol = {}
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


def _subset(rows: int, most: int | None) -> Tensor | slice:
    """All ``rows`` (a slice), or ``most`` of them at random (seed 0), in order."""
    if most is None or rows <= most:
        return slice(None)
    generator = torch.Generator().manual_seed(0)
    return torch.randperm(rows, generator=generator)[:most].sort().values


def _solve(kernel: Tensor, noise: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
    """Dual weights ``alpha = C^-1 z`` and the squared leave-one-out residuals.

    A GP's leave-one-out residual of training point ``i`` is ``alpha_i / [C^-1]_ii``
    (Rasmussen & Williams, eq. 5.12): no refit per point.
    """
    cov = kernel + (noise + 1e-6) * torch.eye(len(z), dtype=z.dtype)
    chol = torch.linalg.cholesky(cov)
    alpha = torch.cholesky_solve(z[:, None], chol)[:, 0]
    inverse_diagonal = torch.cholesky_inverse(chol).diagonal()
    return alpha, (alpha / inverse_diagonal).square()


def _maximize_evidence(parts: tuple[Tensor | None, Tensor | None], z: Tensor, steps: int,
                       lr: float) -> Tensor:
    """``[a, b, l, s]`` maximizing the marginal likelihood of ``z``; starts at 1, e^-1, 1, 0.1.

    Adam on the log hyperparameters with the gradient in closed form (Rasmussen & Williams, eq.
    5.9): ``d nll / d theta = tr((C^-1 - alpha alpha^T) dC/dtheta) / 2``. One Cholesky and one
    inverse a step, about a quarter of what autograd through the Cholesky costs (the GP's fit
    was 9% of a small-data fit's CPU time); the same gradient, so the same steps.
    """
    log = torch.tensor([0.0, -1.0, 0.0, -2.302585], dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adam([log], lr=lr)
    for _ in range(steps):
        log.grad = _evidence_gradient(parts, z, log.detach().exp())
        optimizer.step()
    return log.detach().exp()


def _evidence_gradient(parts: tuple[Tensor | None, Tensor | None], z: Tensor,
                       hyper: Tensor) -> Tensor:
    """Gradient ``[4]`` of the negative log marginal likelihood over the log hyperparameters."""
    tanimoto, sqdist = parts
    cov = FingerprintGP._kernel(parts, hyper) + (hyper[3] + 1e-6) * torch.eye(
        len(z), dtype=z.dtype)
    chol = torch.linalg.cholesky(cov)
    alpha = torch.cholesky_solve(z[:, None], chol)
    # W = C^-1 - alpha alpha^T; each gradient is sum(W * dC/dlog theta) / 2
    weights = torch.cholesky_inverse(chol).sub_(alpha @ alpha.T)
    grad = torch.zeros(4, dtype=z.dtype)
    if tanimoto is not None:
        grad[0] = hyper[0] * (weights * tanimoto).sum()
    if sqdist is not None:
        rbf = hyper[1] * torch.exp(-sqdist / (2 * hyper[2] ** 2))
        grad[1] = (weights * rbf).sum()
        grad[2] = (weights * rbf * sqdist).sum() / hyper[2] ** 2
    grad[3] = hyper[3] * weights.diagonal().sum()
    return grad / 2
