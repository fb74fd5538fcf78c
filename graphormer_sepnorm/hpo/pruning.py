"""The Lightning callback a trial's fit runs with: reports to the trial, stops when pruned.

``graphormer-sepnorm-hpo`` appends it to each trial's fit (``--trainer.callbacks+=``), which
runs in a process of its own: the callback opens the study's storage, reports the objective
after every validation, and when the pruner says so stops the fit as an early stop does (the
epoch ends, ``last.ckpt`` is written, the process exits 0). When the fit ends, other than by
``--trainer.max_time``, it writes the trial's result to ``result`` for the worker to tell the
study.

The objective is the metric predictions use: the fit's checkpoint monitor (``val/mae`` for the
small-data recipe), or its blend with the fingerprint GP (``val/mae_blend``) where the fit logs
one (``--gp.weight`` above 0). Reported each validation, it feeds the pruner; the trial's value
is the objective of the best checkpoint (the one the checkpoint monitor chose, the one a user
predicts with), as saved in that checkpoint. Steps are epochs (``trainer.current_epoch``):
trials of other batch sizes take other numbers of optimizer steps, and the median pruner
compares trials at equal steps.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import optuna
from lightning.pytorch import Callback, LightningModule, Trainer

from graphormer_sepnorm.checkpoints import read_checkpoint
from graphormer_sepnorm.hpo.study import open_storage, trial_handle
from graphormer_sepnorm.training.resume import stopped_by_time

__all__ = ["TrialPruning", "objective_name"]


def objective_name(trainer: Trainer) -> tuple[str, str]:
    """The objective's name and mode: the checkpoint monitor, or its ``_blend`` where logged."""
    callback = trainer.checkpoint_callback
    monitor = getattr(callback, "monitor", None)
    if not monitor:
        raise ValueError("a trial's fit needs a ModelCheckpoint with a monitor (val/...): the "
                         "objective is the metric the best checkpoint is chosen on")
    blend = f"{monitor}_blend"
    return (blend if blend in trainer.callback_metrics else monitor), callback.mode


class TrialPruning(Callback):
    """Reports the objective to an Optuna trial each validation; stops the fit when pruned.

    Args:
        storage: the study's journal file or database URL
            (:func:`~graphormer_sepnorm.hpo.study.open_storage`).
        study: the study's name.
        trial: the trial's number.
        result: the JSON file the result goes to: ``value``, ``metric``, ``pruned``, ``epoch``,
            ``best_checkpoint``.
        n_startup_trials: the median pruner prunes nothing before this many trials finished.
        n_warmup_steps: nor before this many epochs of a trial.
        prune: ``False`` reports without pruning.
    """

    def __init__(self, storage: str, study: str, trial: int, result: str,
                 n_startup_trials: int = 5, n_warmup_steps: int = 10, prune: bool = True) -> None:
        self.storage, self.study_name, self.number = storage, study, trial
        self.result, self.prune = Path(result), prune
        self.pruner = optuna.pruners.MedianPruner(n_startup_trials, n_warmup_steps)
        self.pruned_at: int | None = None
        self._trial: optuna.trial.Trial | None = None

    def _handle(self) -> optuna.trial.Trial:
        if self._trial is None:
            study = optuna.load_study(study_name=self.study_name,
                                      storage=open_storage(self.storage), pruner=self.pruner)
            self._trial = trial_handle(study, self.number)
        return self._trial

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Checks that the fit's monitor goes the study's way."""
        if trainer.is_global_zero:
            _, mode = objective_name(trainer)
            direction = self._handle().study.direction
            wanted = "min" if direction == optuna.study.StudyDirection.MINIMIZE else "max"
            if mode != wanted:
                raise ValueError(f"the fit's checkpoint monitor has mode {mode!r} but the study "
                                 f"{self.study_name!r} wants {wanted}: pass --direction "
                                 f"{'maximize' if mode == 'max' else 'minimize'} to "
                                 "graphormer-sepnorm-hpo")

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Reports this epoch's objective; asks the pruner; stops the fit if it prunes."""
        if trainer.sanity_checking:
            return
        prune = False
        if trainer.is_global_zero:
            name, _ = objective_name(trainer)
            value = float(trainer.callback_metrics[name])
            trial = self._handle()
            if math.isfinite(value):
                trial.report(value, trainer.current_epoch)
            prune = self.prune and trial.should_prune()
        if trainer.strategy.broadcast(prune, src=0):
            self.pruned_at = trainer.current_epoch
            trainer.should_stop = True

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Writes the result, unless ``max_time`` stopped the fit (it continues later)."""
        if not trainer.is_global_zero or stopped_by_time(trainer):
            return
        name, _ = objective_name(trainer)
        best = getattr(trainer.checkpoint_callback, "best_model_path", "") or ""
        metrics: dict[str, Any] = {}
        if best and Path(best).is_file():
            metrics = read_checkpoint(best, mmap=True).get("metrics", {})
        value = metrics.get(name)
        state = {"metric": name, "value": None if value is None else float(value),
                 "pruned": self.pruned_at is not None, "epoch": trainer.current_epoch,
                 "pruned_at": self.pruned_at, "best_checkpoint": best}
        partial = self.result.with_name(f".{self.result.name}.{os.getpid()}")
        partial.write_text(json.dumps(state, indent=1))
        os.replace(partial, self.result)
