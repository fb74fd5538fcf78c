"""The network and a fingerprint GP as one model: ``(1 - w) * network + w * GP``.

A :class:`BlendedModel` is what ``test``, ``validate`` and prediction run when a fit made one
(:class:`~graphormer_sepnorm.ensemble.callback.FingerprintGPBlend`): the network's predictions
in the targets' units, and the GP's on the same molecules' features (``batch.mol_x``), mixed
with a fixed weight. Its deviations (:meth:`BlendedModel.predict`) add the spread of its two
members to the GP's own: ``sigma^2 = gp^2 + w (1 - w) (network - GP)^2``, the variance of the
blend's mixture about its mean; scored by Spearman's correlation with the absolute errors on
the validation splits of three small sets, it ranked errors better than the GP's alone on each
(0.15, 0.24, 0.62 against 0.15, 0.21, 0.58: ``benchmarks/uncertainty_sources.py``).
It travels in a checkpoint beside the network, under
``checkpoint['ensemble']`` (:meth:`BlendedModel.to_checkpoint`: plain values and tensors, so it
loads with ``weights_only=True``); the network's own ``state_dict`` knows nothing of it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from graphormer_sepnorm.ensemble.calibration import Z90, conformal_scale
from graphormer_sepnorm.ensemble.fingerprint_gp import FingerprintGP

__all__ = ["DEVIATIONS", "KIND", "BlendedModel"]

#: ``checkpoint['ensemble']['kind']`` of a fingerprint-GP blend.
KIND = "fingerprint_gp"
#: The kinds of a blend's raw deviation, the GP's alone (checkpoints calibrated before the
#: members' spread was added), or with the spread of its two members (the default).
DEVIATIONS = ("gp", "gp+members")


class BlendedModel(nn.Module):
    """A network's predictions blended with a fingerprint GP's.

    Args:
        gp: the GP (fitted, or to be fitted before it predicts).
        weight: ``w`` in ``(1 - w) * network + w * GP``, in [0, 1]: 0 is the network alone,
            1 the GP alone.
        network: a callable from a batch to the network's predictions ``[B, T]`` in the
            targets' units (a :class:`~graphormer_sepnorm.training.module.GraphormerModule`),
            for :meth:`forward`; :meth:`combine` needs none.
        q90: per target, the scale that makes the raw deviations a calibrated 90% interval of
            the blend (:meth:`calibrate`); ``None``: not calibrated (no deviations).
        deviation: the raw deviation, one of :data:`DEVIATIONS`. Default: ``'gp+members'``.

    Raises:
        ValueError: a weight outside [0, 1], an unknown deviation.
    """

    def __init__(self, gp: FingerprintGP, weight: float,
                 network: Callable[[Any], Tensor] | None = None,
                 q90: list[float] | None = None, deviation: str = "gp+members") -> None:
        super().__init__()
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"the GP's weight must be in [0, 1], not {weight}")
        if deviation not in DEVIATIONS:
            raise ValueError(f"deviation must be one of {DEVIATIONS}, not {deviation!r}")
        self.deviation = deviation
        self.gp, self.weight = gp, float(weight)
        self._network = [network]  # in a list: not a submodule (its weights are its own)
        self.q90 = None if q90 is None else [float(q) for q in q90]

    @property
    def calibrated(self) -> bool:
        """Whether :meth:`predict` gives deviations (calibrated, and a GP that has them)."""
        return self.q90 is not None and self.gp.has_std

    def predict(self, preds: Tensor, mol_x: Tensor,
                raw: bool = False) -> tuple[Tensor, Tensor | None]:
        """The blend's predictions and standard deviations ``[B, T]`` (targets' units).

        The raw deviations (``raw``) are the GP's, with the members' spread
        ``w (1 - w) (preds - GP)^2`` added to their variance (``deviation='gp+members'``);
        otherwise scaled by the calibration (:meth:`calibrate`), so that ``mean ± 1.645 std``
        is a 90% interval. ``None`` instead of deviations when there are none (not calibrated,
        a GP saved without them).
        """
        want = self.gp.has_std and (raw or self.q90 is not None)
        gp_mean, sigma = self.gp.predict(mol_x, with_std=want)
        w = self.weight
        mean = preds if w == 0.0 else (1 - w) * preds + w * gp_mean.to(preds.dtype)
        if sigma is not None and self.deviation == "gp+members":
            spread = (preds.float() - gp_mean.float()).square() * (w * (1 - w))
            sigma = (sigma.float().square() + spread).sqrt()
        if sigma is None or raw:
            return mean, sigma
        return mean, sigma * torch.tensor(self.q90, device=sigma.device) / Z90

    def calibrate(self, mean: Tensor, sigma: Tensor, y: Tensor) -> None:
        """Sets ``q90`` from held-out molecules' blend ``mean``, raw ``sigma`` and ``y``."""
        scores = (y - mean).abs() / sigma.clamp_min(1e-12)
        self.q90 = [float(conformal_scale(scores[:, t])) for t in range(y.shape[1])]

    def combine(self, preds: Tensor, mol_x: Tensor) -> Tensor:
        """``(1 - w) * preds + w * GP(mol_x)`` for network predictions ``preds [B, T]``."""
        if self.weight == 0.0:
            return preds
        return (1 - self.weight) * preds + self.weight * self.gp(mol_x).to(preds.dtype)

    def forward(self, batch: Any) -> Tensor:
        """The blended predictions ``[B, T]`` of a batch (with ``mol_x``)."""
        network = self._network[0]
        if network is None:
            raise RuntimeError("BlendedModel without a network: use combine(preds, mol_x)")
        return self.combine(network(batch), batch.mol_x)

    def to_checkpoint(self) -> dict[str, Any]:
        """The GP and the weight as ``checkpoint['ensemble']``."""
        return {"kind": KIND, "weight": self.weight,
                "columns": {name: list(cols) for name, cols in self.gp.slices.items()},
                "num_targets": int(self.gp.hyper.shape[0]), "q90": self.q90,
                "deviation": self.deviation,
                "state": {k: v.detach().cpu().clone() for k, v in self.gp.state_dict().items()}}

    @classmethod
    def from_checkpoint(cls, entry: Mapping[str, Any],
                        network: Callable[[Any], Tensor] | None = None,
                        weight: float | None = None) -> BlendedModel:
        """The model :meth:`to_checkpoint` saved; ``weight`` overrides the saved one.

        With another weight than the saved one the calibration is dropped: it held for the
        blend it was made with.

        Raises:
            ValueError: an entry of another kind.
        """
        if entry.get("kind") != KIND:
            raise ValueError(f"unknown ensemble kind {entry.get('kind')!r} (this code knows "
                             f"{KIND!r})")
        gp = FingerprintGP({k: tuple(v) for k, v in entry["columns"].items()},
                           int(entry["num_targets"]))
        gp.load_state_dict(dict(entry["state"]))
        # a calibration holds for the weight it was made with (another needs a validation)
        same = weight is None or weight == entry["weight"]
        return cls(gp, entry["weight"] if weight is None else weight, network,
                   entry.get("q90") if same else None, entry["deviation"])
