"""The module's side of the fingerprint GP blend (``gp_weight``): build, fit at fit start, blend.

See :mod:`~graphormer_sepnorm.nn.fingerprint_gp`. Predictions become
``(1 - gp_weight) * network + gp_weight * GP`` in test, validate and prediction. Validation
during fit scores the network alone, so the best checkpoint is the network's own best; the
network's loss and training are unchanged.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import Tensor

from graphormer_sepnorm.nn.fingerprint_gp import FingerprintGP, feature_slices

__all__ = ["blend", "fit_fingerprint_gp", "make_fingerprint_gp", "prepare_gp"]


def make_fingerprint_gp(info: dict[str, Any], gp_weight: float,
                        packed: bool) -> FingerprintGP | None:
    """The unfitted GP of a module, or ``None`` (the blend is off).

    There is one when ``gp_weight > 0`` on a single regression model with Morgan or
    RDKit-descriptor molecule features.

    Raises:
        ValueError: ``gp_weight`` outside [0, 1].
    """
    if not 0.0 <= gp_weight <= 1.0:
        raise ValueError(f"gp_weight must be in [0, 1], not {gp_weight}")
    names = info.get("featurizer", {}).get("mol_features", [])
    slices = feature_slices(names) if names else {}
    if gp_weight == 0 or packed or info["task"] != "regression" or not slices:
        return None
    return FingerprintGP(slices, len(info["target_names"]))


def why_off(info: dict[str, Any], packed: bool) -> str:
    """Why :func:`make_fingerprint_gp` gave no GP although ``gp_weight > 0``."""
    if packed:
        return "packed replicas (seeds) train the network alone"
    if info["task"] != "regression":
        return f"regression only (task {info['task']!r})"
    return "it needs molecule features rdkit2d and/or morgan (--data.mol_features)"


def training_features(datamodule: Any) -> tuple[Tensor, Tensor]:
    """``mol_x [N, F]`` and ``y [N, T]`` of the training split (NaN where missing)."""
    datamodule.setup("fit")
    graphs = datamodule.splits["train"]
    x = torch.cat([g.mol_x.reshape(1, -1).float() for g in graphs])
    y = torch.cat([g.y.reshape(1, -1).float() for g in graphs])
    return x, y


def fit_fingerprint_gp(gp: FingerprintGP, datamodule: Any, max_train: int) -> str:
    """Fits ``gp`` on the training molecules; a one-line report (or why it stays off)."""
    x, y = training_features(datamodule)
    if len(x) > max_train:
        return (f"fingerprint GP off: {len(x):,} training molecules > gp_max_train "
                f"{max_train:,} (an exact GP costs N^3)")
    started = time.perf_counter()
    gp.fit(x, y)
    a, b, length, noise = (f"{v:.3g}" for v in gp.hyper[0].tolist())
    return (f"fingerprint GP fitted on {len(x):,} molecules in "
            f"{time.perf_counter() - started:.1f} s (target 0: a={a} b={b} l={length} "
            f"s={noise}); validation during fit scores the network alone, test, validate "
            f"and predict the blend")


def prepare_gp(module: Any) -> str | None:
    """At fit start: fits the module's GP unless loaded fitted; what to print, if anything."""
    if module.gp is None:
        if module.hparams.get("gp_weight", 0.0) > 0:
            return "fingerprint GP off: " + why_off(module.dataset_info,
                                                    bool(module.hparams.get("seeds")))
        return None
    if module.gp.fitted:  # a resumed fit
        return None
    # fit puts the buffers where the empty ones are: the module's device by fit start
    return fit_fingerprint_gp(module.gp, module.trainer.datamodule, module.hparams["gp_max_train"])


def blend(preds: Tensor, gp: FingerprintGP | None, weight: float, mol_x: Tensor | None) -> Tensor:
    """``(1 - weight) * preds + weight * gp(mol_x)``; ``preds`` when there is no fitted GP."""
    if gp is None or not gp.fitted or mol_x is None:
        return preds
    return (1 - weight) * preds + weight * gp(mol_x).to(preds.dtype)
