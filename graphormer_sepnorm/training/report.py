"""What a fit tells its user: one line per epoch where there is no progress bar, and a summary."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import EarlyStopping

from graphormer_sepnorm.checkpoints import read_checkpoint
from graphormer_sepnorm.training.resume import newest, stopped_by_time

ORDER = ("mae", "rmse", "r2", "roc_auc", "pr_auc", "ece", "loss")


def _rank(name: str) -> tuple[int, str]:
    metric = name.split("/", 1)[-1]
    return (ORDER.index(metric) if metric in ORDER else len(ORDER), name)


def format_metrics(metrics: Mapping[str, Any], prefixes: tuple[str, ...]) -> str:
    """``val/mae 0.5123, val/rmse 0.7, ...``: scalars under ``prefixes``, main metrics first."""
    names = sorted((k for k in metrics if k.startswith(prefixes)), key=_rank)
    return ", ".join(f"{k} {float(metrics[k]):.4g}" for k in names)


def scalar_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The one-number metrics as plain floats (checkpoint-safe)."""
    return {k: float(v) for k, v in metrics.items()
            if not isinstance(v, torch.Tensor) or v.numel() == 1}


class FitLog(Callback):
    """One line per training epoch on stdout when there is no progress bar; metrics in checkpoints.

    Every checkpoint gets ``checkpoint['metrics']`` (the metrics logged so far, plain floats) and
    ``checkpoint['fit_seconds']`` (the fit's wall time, a resumed fit's earlier calls included).
    """

    def __init__(self) -> None:
        self._started = self._fit_started = time.perf_counter()
        self._fit_before = 0.0

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Starts the fit's clock."""
        self._fit_started, self._fit_before = time.perf_counter(), 0.0

    def on_load_checkpoint(self, trainer: Trainer, pl_module: LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        """A resumed fit counts on from the seconds its checkpoint recorded."""
        self._fit_before = float(checkpoint.get("fit_seconds", 0.0))

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Starts the epoch's clock."""
        self._started = time.perf_counter()

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """``epoch 2/3, step 40: train/loss ..., val/mae ... (3.1 s)`` (after validation)."""
        if trainer.progress_bar_callback is not None or not trainer.is_global_zero:
            return
        epochs = f"/{trainer.max_epochs}" if trainer.max_epochs and trainer.max_epochs > 0 else ""
        metrics = format_metrics(trainer.callback_metrics, ("train/", "val/"))
        print(f"epoch {trainer.current_epoch + 1}{epochs}, step {trainer.global_step}: {metrics} "
              f"({time.perf_counter() - self._started:.1f} s)", flush=True)

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        """Stores the metrics logged so far and the fit's seconds in the checkpoint."""
        checkpoint["metrics"] = scalar_metrics(trainer.callback_metrics)
        checkpoint["fit_seconds"] = self._fit_before + time.perf_counter() - self._fit_started


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _how_it_ended(trainer: Trainer, interrupted: bool) -> str:
    if interrupted:
        return "interrupted"
    if stopped_by_time(trainer):
        return "stopped by max_time (unfinished)"
    stopper = next((c for c in trainer.callbacks if isinstance(c, EarlyStopping)), None)
    if stopper is not None and stopper.stopped_epoch > 0:
        return f"stopped early at epoch {stopper.stopped_epoch + 1}"
    return "finished"


def logger_folder(trainer: Trainer) -> Path | None:
    """The logger's folder for this run (not created here); ``None`` without a logger.

    Not ``Trainer.log_dir``: it broadcasts, and the summary is made on process 0 alone.
    """
    folder = getattr(trainer.logger, "log_dir", None) if trainer.logger is not None else None
    return None if folder is None else Path(folder)


def last_checkpoint(trainer: Trainer) -> str | None:
    """The newest ``last*.ckpt`` in the folders of the fit's checkpoint callbacks, if any."""
    folders = {c.dirpath for c in trainer.checkpoint_callbacks if getattr(c, "dirpath", None)}
    found = newest(p for folder in folders for p in Path(folder).glob("last*.ckpt"))
    return None if found is None else str(found)


def _checkpoint_lines(trainer: Trainer) -> list[str]:
    callback = trainer.checkpoint_callback
    best = getattr(callback, "best_model_path", "") or ""
    last = last_checkpoint(trainer) or ""
    lines = []
    if best and Path(best).is_file():
        ckpt = read_checkpoint(best, mmap=True)
        metrics = format_metrics(ckpt.get("metrics", {}), ("val/",))
        lines += [f"  best checkpoint: {best}",
                  f"    epoch {ckpt.get('epoch', 0) + 1}, step {ckpt.get('global_step')}: "
                  f"{metrics or 'no validation metrics'}"]
    elif callback is not None:
        lines.append("  best checkpoint: none saved")
    if last:
        lines.append(f"  last checkpoint: {last}")
    return lines


def fit_summary(trainer: Trainer, seconds: float, interrupted: bool = False,
                test: Mapping[str, Any] | str | None = None) -> str:
    """The block printed when ``fit`` ends: how, checkpoints with metrics, the best one's test.

    Args:
        trainer: The trainer after ``fit``.
        seconds: Wall time of the fit.
        interrupted: Stopped by Ctrl-C.
        test: The best checkpoint's test metrics, or why there are none (``None``: no line).
    """
    lines = [f"fit {_how_it_ended(trainer, interrupted)} after {trainer.current_epoch} "
             f"epoch(s), {trainer.global_step} step(s), wall time {_duration(seconds)}",
             f"  run folder: {logger_folder(trainer) or trainer.default_root_dir}"]
    lines += _checkpoint_lines(trainer)
    if isinstance(test, str):
        lines.append(f"  test: {test}")
    elif test is not None:
        lines.append(f"  test of the best checkpoint: {format_metrics(test, ('test/',))}")
    return "\n".join(lines)


def run_test_of_best(trainer: Trainer, model: LightningModule,
                     datamodule: Any) -> dict[str, Any] | str:
    """Tests the best checkpoint when the data has a test split; else says why not.

    The model keeps fit's final weights, the trainer fit's ``callback_metrics`` and callbacks.
    """
    splits = getattr(datamodule, "splits", None) or {}
    if not splits.get("test"):
        return "no test split"
    best = getattr(trainer.checkpoint_callback, "best_model_path", "") or ""
    if not best:
        return "no best checkpoint to test"
    # What fit left stays as it was: the weights, the metrics, and the callbacks' state, which
    # testing a checkpoint restores from it (ModelCheckpoint's last_model_path, best score...).
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    metrics = dict(trainer.callback_metrics)
    states = [(c, dict(vars(c))) for c in trainer.callbacks]
    try:
        results = trainer.test(model, datamodule=datamodule, ckpt_path=best, verbose=False)
    finally:
        model.load_state_dict(weights)
        trainer.callback_metrics.clear()
        trainer.callback_metrics.update(metrics)
        for callback, state in states:
            vars(callback).clear()
            vars(callback).update(state)
    return dict(results[0]) if results else "no test metrics"


def print_summary(text: str) -> None:
    """Prints the summary block on stdout, set apart by blank lines."""
    print(f"\n{text}\n", file=sys.stdout, flush=True)
