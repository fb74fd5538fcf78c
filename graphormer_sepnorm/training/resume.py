"""Resumption: per-step dropout seeds, ``--ckpt_path last`` lookup, ``max_time`` per call."""

from __future__ import annotations

import os
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback, Timer

from graphormer_sepnorm.checkpoints import read_checkpoint


class StepSeeding(Callback):
    """Seeds the random generators from (seed, batch count, rank) before every training batch.

    As in fairseq (seed + update number), dropout masks then depend only on where the run is, so
    a run resumed from ``last.ckpt`` draws what the uninterrupted run would have drawn (restored
    generators would not: a resumed run draws at other moments). Torch, NumPy and ``random``.

    Args:
        seed: base seed; ``None`` takes ``seed_everything``'s (``$PL_GLOBAL_SEED``), else a
            random one. It is stored in checkpoints and restored with them.
    """

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Fixes the base seed at the start of a run (a resumed run then loads the saved one)."""
        if self.seed is None:
            env = os.environ.get("PL_GLOBAL_SEED")
            self.seed = int(env) if env is not None else random.SystemRandom().randrange(2**31)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                             batch: Any, batch_idx: int) -> None:
        """Seeds every generator for this batch."""
        key = [self.seed, trainer.fit_loop.total_batch_idx, trainer.global_rank]
        seed = int(np.random.SeedSequence(key).generate_state(1)[0])
        torch.manual_seed(seed)
        np.random.seed(seed)
        random.seed(seed)

    def state_dict(self) -> dict[str, Any]:
        """The base seed."""
        return {"seed": self.seed}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Takes the checkpoint's base seed."""
        self.seed = state_dict.get("seed", self.seed)


class TimeLimitPerCall(Callback):
    """Makes ``Trainer(max_time=...)`` limit each call of a fit, not its total over resumes.

    Lightning's Timer counts on from the time saved in a checkpoint, so a fit stopped by
    ``max_time`` and resumed with ``--ckpt_path last`` stopped again at once; here each call
    trains for up to ``max_time``, as a scheduler's job with a wall-clock limit needs.
    """

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        """Drops the Timer's state from ``checkpoint`` before the callbacks load theirs."""
        callbacks = checkpoint.get("callbacks") or {}
        for key in [k for k in callbacks if str(k) == Timer.__qualname__]:
            del callbacks[key]


class LastAtEnd(Callback):
    """Writes ``last.ckpt`` when a fit ends after the last one a checkpoint callback wrote.

    Into the first checkpoint callback's folder, so that steps after the last validation are
    not lost. Not after ``max_time`` (that stop saved a resumable mid-epoch ``last.ckpt``).
    """

    def __init__(self) -> None:
        self._saved_step = -1

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        """Notes the step of the latest checkpoint."""
        self._saved_step = trainer.global_step

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Saves ``last.ckpt`` unless the latest checkpoint is of this step."""
        callback = trainer.checkpoint_callback
        folder = getattr(callback, "dirpath", None)
        if folder is None or self._saved_step == trainer.global_step or trainer.global_step == 0 \
                or stopped_by_time(trainer) or trainer.fast_dev_run:
            return
        trainer.save_checkpoint(Path(folder) / "last.ckpt")


def stopped_by_time(trainer: pl.Trainer) -> bool:
    """Whether ``max_time`` (Lightning's ``Timer``) ended the fit before its steps or epochs did."""
    timer = next((c for c in trainer.callbacks if isinstance(c, Timer)), None)
    left = None if timer is None else timer.time_remaining()
    if left is None or left > 0:
        return False
    steps_done = trainer.max_steps != -1 and trainer.global_step >= trainer.max_steps
    # a stopped epoch counts as done too: the last one also ran all its batches
    epochs = trainer.fit_loop.max_epochs
    batches = trainer.fit_loop.epoch_loop.batch_progress.current.ready
    epochs_done = epochs not in (None, -1) and trainer.current_epoch >= epochs \
        and batches >= trainer.num_training_batches
    return not (steps_done or epochs_done)


def find_last_checkpoint(root: str | Path) -> Path | None:
    """The most recently written ``last*.ckpt`` in ``root/*/checkpoints``, or ``None``."""
    return newest(Path(root).glob("*/checkpoints/last*.ckpt"))


def newest(paths: Iterable[Path]) -> Path | None:
    """The most recently written file among ``paths``, or ``None``."""
    files = [p for p in paths if p.is_file()]
    return max(files, key=lambda p: p.stat().st_mtime) if files else None


def monitor_state(checkpoint: dict[str, Any]) -> dict[str, Any] | None:
    """The saved state of the checkpoint's monitoring checkpoint callback, or ``None``."""
    for state in (checkpoint.get("callbacks") or {}).values():
        if isinstance(state, dict) and state.get("monitor") and "best_model_path" in state:
            return state
    return None


def best_checkpoint(checkpoint: str | Path) -> Path | None:
    """The best checkpoint that the monitoring ``ModelCheckpoint`` recorded in ``checkpoint``."""
    state = monitor_state(read_checkpoint(checkpoint, mmap=True))
    return Path(state["best_model_path"]) if state and state.get("best_model_path") else None
