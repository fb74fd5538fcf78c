"""The callback that fits a fingerprint GP beside the network and scores their blend.

``--gp.weight 0.5`` (``configs/smiles_csv.yaml``) adds it to a fit: at fit start the GP is
fitted on the training molecules' features (not again on a resumed fit), and every validation
and test logs the blend's metric beside the network's: ``val/mae`` is the network alone (the
checkpoints are chosen on it: chosen on the blend, a GP that fits validation well picked an
undertrained network), ``val/mae_blend`` the blend. Checkpoints carry the GP
(``checkpoint['ensemble']``); ``test``, ``validate`` and ``predict`` with such a checkpoint
blend with the saved weight unless ``--gp.weight`` says otherwise (0: the network alone; 1: the
GP alone). The Lightning module knows nothing of it: it returns its predictions from its
evaluation steps, which this reads.

Uncertainty: each validation calibrates the GP's predictive deviations on the validation
molecules (split-conformal, :mod:`~graphormer_sepnorm.ensemble.calibration`), so the checkpoint
saved after it predicts ``<target>_std`` and a 90% interval; ``test`` logs the interval's
coverage (``test/coverage90_blend``), the Gaussian NLL (``test/nll_blend``) and Spearman's
correlation of the deviations with the absolute errors (``test/std_error_spearman_blend``).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch import Tensor

from graphormer_sepnorm.ensemble.blend import BlendedModel
from graphormer_sepnorm.ensemble.calibration import coverage, gaussian_nll, std_error_spearman
from graphormer_sepnorm.ensemble.fingerprint_gp import FingerprintGP, gp_columns

__all__ = ["FingerprintGPBlend", "why_off"]


def why_off(info: dict[str, Any], packed: bool) -> str | None:
    """Why a model of ``info`` gets no GP (``None`` when it can have one)."""
    if packed:
        return "packed replicas (seeds) train the network alone"
    if info["task"] != "regression":
        return f"regression only (task {info['task']!r})"
    if not gp_columns(info.get("featurizer", {})):
        return "it needs molecule features rdkit2d and/or morgan (--data.mol_features)"
    return None


def _gather(x: Tensor) -> Tensor:
    """``x`` of every process, concatenated (processes may hold different counts)."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return x
    parts: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(parts, x.cpu())
    return torch.cat(parts).to(x.device)


def training_features(datamodule: Any) -> tuple[Tensor, Tensor]:
    """``mol_x [N, F]`` and ``y [N, T]`` of the training split (NaN where missing)."""
    datamodule.setup("fit")
    graphs = datamodule.splits["train"]
    return (torch.cat([g.mol_x.reshape(1, -1).float() for g in graphs]),
            torch.cat([g.y.reshape(1, -1).float() for g in graphs]))


class FingerprintGPBlend(Callback):
    """Fits a fingerprint GP at fit start, scores the blend, keeps the GP in checkpoints.

    Logs ``<stage>/<metric>_blend`` beside the network's ``<stage>/<metric>``.

    Args:
        weight: the GP's weight in the blend, in [0, 1]. ``None`` (default): the weight of the
            checkpoint being tested or validated, and no GP in a fit.
        max_train: the GP stays off above this many training molecules (its cost is N^3).
            Default: 5,000.
        evidence_rows: the GP's hyperparameters maximize the marginal likelihood of at most
            this many training molecules (a fixed random subset), its weights are solved on
            all (:meth:`FingerprintGP.fit`); ``None``: all. Default: 1,000 (each of the 150
            likelihood steps costs N^3; GP alone, CPU s and test MAE: D4 Ki's 1,492 molecules
            41 -> 13, 0.6718 -> 0.6724; CHEMBL234 Ki's 2,925 382 -> 17, 0.5402 -> 0.5445).
    """

    def __init__(self, weight: float | None = None, max_train: int = 5000,
                 evidence_rows: int | None = 1000) -> None:
        if weight is not None and not 0.0 <= weight <= 1.0:
            raise ValueError(f"gp weight must be in [0, 1], not {weight}")
        if evidence_rows is not None and evidence_rows < 2:
            raise ValueError(f"gp evidence_rows must be at least 2 or None, not {evidence_rows}")
        self.weight, self.max_train, self.evidence_rows = weight, max_train, evidence_rows
        self.blend: BlendedModel | None = None
        self._metrics: dict[str, Any] = {}
        self._seen: dict[str, list[tuple[Tensor, Tensor, Tensor]]] = {}

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """For a fit with a weight: an unfitted GP, if the model can have one."""
        if stage != "fit" or not self.weight or self.blend is not None:
            return
        info = pl_module.dataset_info
        reason = why_off(info, bool(pl_module.hparams.get("seeds")))
        if reason is not None:
            self._say(trainer, f"fingerprint GP off: {reason}")
            return
        gp = FingerprintGP(gp_columns(info["featurizer"]), len(info["target_names"]))
        self.blend = BlendedModel(gp, self.weight)

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Fits the GP on the training molecules, unless a resumed fit restored it."""
        if self.blend is None or self.blend.gp.fitted:
            return
        x, y = training_features(trainer.datamodule)
        if len(x) > self.max_train:
            self._say(trainer, f"fingerprint GP off: {len(x):,} training molecules > "
                               f"max_train {self.max_train:,} (an exact GP costs N^3)")
            self.blend = None
            return
        started = time.perf_counter()
        self.blend.gp.fit(x, y, evidence_rows=self.evidence_rows)
        a, b, length, noise = (f"{v:.3g}" for v in self.blend.gp.hyper[0].tolist())
        self._say(trainer, f"fingerprint GP fitted on {len(x):,} molecules in "
                           f"{time.perf_counter() - started:.1f} s (target 0: a={a} b={b} "
                           f"l={length} s={noise}); val/<metric> scores the network, "
                           f"val/<metric>_blend the blend with weight {self.blend.weight}")

    @staticmethod
    def _say(trainer: Trainer, text: str) -> None:
        if trainer.is_global_zero:
            print(text, flush=True)

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        """Puts the fitted GP and its weight in ``checkpoint['ensemble']``."""
        if self.blend is not None and self.blend.gp.fitted:
            checkpoint["ensemble"] = self.blend.to_checkpoint()

    def on_load_checkpoint(self, trainer: Trainer, pl_module: LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        """Takes the checkpoint's GP (a resumed fit, a test); ``weight``, if set, wins."""
        entry = checkpoint.get("ensemble")
        if entry is not None:
            self.blend = BlendedModel.from_checkpoint(entry, weight=self.weight)

    def _update(self, stage: str, pl_module: LightningModule, outputs: Any, batch: Any) -> None:
        if self.blend is None or not self.blend.gp.fitted or outputs is None:
            return
        if stage not in self._metrics:
            metrics = pl_module.task.metrics().to(outputs.device)
            metrics.scale = getattr(pl_module.val_metrics, "scale", None)
            self._metrics[stage] = metrics
        # validation: the GP's raw deviations, which calibrate; test: the calibrated ones
        blended, std = self.blend.to(outputs.device).predict(outputs, batch.mol_x,
                                                             raw=stage == "val")
        self._metrics[stage].update(blended, batch.y)
        if std is not None:
            self._seen.setdefault(stage, []).append((blended.detach(), std.detach(),
                                                     batch.y.detach().to(blended.dtype)))

    def _log(self, stage: str, pl_module: LightningModule) -> None:
        metrics = self._metrics.pop(stage, None)
        if metrics is None:
            return
        pl_module.log_metrics(stage, metrics, suffix="_blend")
        for name, value in self._uncertainty(stage, pl_module).items():
            pl_module.log(f"{stage}/{name}_blend", value, sync_dist=False)

    def _uncertainty(self, stage: str, pl_module: LightningModule) -> dict[str, Tensor]:
        """Validation calibrates the deviations; test scores the calibrated ones."""
        seen = self._seen.pop(stage, [])
        if not seen:
            return {}
        mean, std, y = (_gather(torch.cat(parts)) for parts in zip(*seen, strict=True))
        if stage == "val":
            self.blend.calibrate(mean, std, y)
            return {}
        return {"coverage90": coverage(mean, std, y), "nll": gaussian_nll(mean, std, y),
                "std_error_spearman": std_error_spearman(mean, std, y)}

    def on_validation_batch_end(self, trainer: Trainer, pl_module: LightningModule,
                                outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        """Scores the blend on the batch (the module returned its predictions)."""
        if not trainer.sanity_checking:
            self._update("val", pl_module, outputs, batch)

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Logs ``val/<metric>_blend``."""
        self._log("val", pl_module)

    def on_test_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any,
                          batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Scores the blend on the batch."""
        self._update("test", pl_module, outputs, batch)

    def on_test_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Logs ``test/<metric>_blend``."""
        self._log("test", pl_module)

    def on_predict_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any,
                             batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """``predict`` returns the blend: the step's predictions are blended in place."""
        if self.blend is not None and self.blend.gp.fitted and outputs is not None:
            outputs.copy_(self.blend.to(outputs.device).combine(outputs, batch.mol_x))
