"""Callbacks that stop fits the ways they stop in real use, deterministically, for the tests.

Named on the command line (``--trainer.callbacks+ interrupt.FakeMinutes``), so that they work in
the fits the tests start as processes too (``tests/`` on ``PYTHONPATH``).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import model_checkpoint, timer

MODULES = (timer, model_checkpoint)


class FakeMinutes(Callback):
    """Lightning's Timer (``max_time``) and ModelCheckpoint (``train_time_interval``) read a clock
    that advances ``minutes`` before every training batch instead of the wall clock.

    Args:
        minutes: minutes per training batch.
    """

    def __init__(self, minutes: float = 5.0) -> None:
        self.minutes = minutes
        self.now = 0.0
        self._saved: list[Any] = []

    def monotonic(self) -> float:
        """The fake clock, in seconds (what the modules call as ``time.monotonic``)."""
        return self.now

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Points the modules' ``time`` at this clock."""
        self._saved = [module.time for module in MODULES]
        for module in MODULES:
            module.time = self

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Gives the modules their ``time`` back."""
        for module, saved in zip(MODULES, self._saved, strict=True):
            module.time = saved

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any,
                             batch_idx: int) -> None:
        """The batch takes ``minutes``."""
        self.now += 60.0 * self.minutes


class KillAtStep(Callback):
    """Kills its own process with SIGKILL before training batch ``step + 1``, once.

    Args:
        step: the steps done when it kills.
        marker: a file written just before the kill; while it exists, nothing is killed (so the
            same command, run again, goes on).
        run: kill only fits whose log folder's path contains this. Default: any.
        group: kill the whole process group (the command that started the fit too, as a lost
            node or a cancelled job does). Default: this process alone.
    """

    def __init__(self, step: int, marker: str, run: str = "", group: bool = False) -> None:
        self.step, self.marker, self.run, self.group = step, Path(marker), run, group

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any,
                             batch_idx: int) -> None:
        """SIGKILL: no callback, no ``finally``, no checkpoint on the way out."""
        if trainer.global_step != self.step or self.marker.exists() \
                or self.run not in str(trainer.log_dir):
            return
        self.marker.write_text("killed\n")
        if self.group:
            os.killpg(os.getpgid(0), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
