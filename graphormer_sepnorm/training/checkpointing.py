"""The Trainer's callbacks of every fit, in code: checkpoints, statistics, diagnostics, the LR.

:data:`DEFAULT_CALLBACKS` is the CLI's default ``trainer.callbacks`` (shown by
``--print_config``), so that a recipe holds the recipe only:

- :class:`BestCheckpoint`: ``best-{epoch}-{step}.ckpt``, the best on the task's validation
  metric (``val/mae``, lowest; ``val/roc_auc``, highest: the module's :attr:`monitor
  <graphormer_sepnorm.training.module.GraphormerModule.monitor>`), after each validation;
- ``last.ckpt`` after each validation, also where ``--trainer.max_time`` stops a fit mid-epoch
  (written at the epoch's end instead, it would mark the epoch done, and the resumed fit would
  skip the epoch's other batches), and every 10 minutes of training, so that a fit killed
  outright resumes with ``--ckpt_path last`` from at most 10 minutes back (two
  ``ModelCheckpoint`` s: Lightning 2.6 writes ``save_last``'s only beside a best one);
- :class:`~graphormer_sepnorm.training.batch_statistics.ReestimateGraphTokenStatistics` before
  each validation (over ``--model.statistics_graphs`` training molecules);
- :class:`~graphormer_sepnorm.diagnostics.GraphTokenDiagnostics` (``val/cls_effective_rank``,
  ``val/cls_uniformity``; about 1% of a run);
- Lightning's ``LearningRateMonitor``, every step.

A config or the command line adds one with ``trainer.callbacks+:`` (``--trainer.callbacks+
CLASS``); a ``trainer.callbacks:`` list replaces them all.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint

__all__ = ["DEFAULT_CALLBACKS", "BestCheckpoint"]

_LAST = {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
         "init_args": {"filename": "last", "enable_version_counter": False}}

#: The default ``trainer.callbacks``, as ``--print_config`` shows them.
DEFAULT_CALLBACKS: list[dict[str, Any]] = [
    {"class_path": "graphormer_sepnorm.training.checkpointing.BestCheckpoint"},
    {**_LAST, "init_args": {**_LAST["init_args"], "save_on_train_epoch_end": False}},
    {**_LAST, "init_args": {**_LAST["init_args"], "train_time_interval": "0:10:00"}},
    {"class_path":
     "graphormer_sepnorm.training.batch_statistics.ReestimateGraphTokenStatistics"},
    {"class_path": "graphormer_sepnorm.diagnostics.GraphTokenDiagnostics"},
    {"class_path": "lightning.pytorch.callbacks.LearningRateMonitor",
     "init_args": {"logging_interval": "step"}},
]


class BestCheckpoint(ModelCheckpoint):
    """The best checkpoint on the validation metric, monitored as the task says.

    A ``ModelCheckpoint`` saved after each validation (never at a training epoch's end), as
    ``best-{epoch}-{step}.ckpt``. Its ``monitor`` and ``mode`` are, unless given, the Lightning
    module's ``monitor`` and ``monitor_mode`` (read at setup, before a resumed fit restores
    the callback's state).

    Args:
        monitor: the logged metric to compare; ``None``: the module's (default).
        mode: ``'min'`` or ``'max'``; ``None``: the module's (default).
        filename: Default: ``'best-{epoch}-{step}'``.
        save_on_train_epoch_end: Default: false (after each validation, as the ``last.ckpt``
            written with it, which then holds this callback's updated state).
        **kwargs: ``ModelCheckpoint``'s other arguments.
    """

    def __init__(self, monitor: str | None = None, mode: Literal["min", "max"] | None = None,
                 filename: str = "best-{epoch}-{step}", save_on_train_epoch_end: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(monitor=monitor, mode=mode or "min", filename=filename,
                         save_on_train_epoch_end=save_on_train_epoch_end, **kwargs)
        self._given_mode = mode

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Takes the monitor and mode from ``pl_module`` where none was given."""
        if self.monitor is None:
            self.monitor = pl_module.monitor
            mode = self._given_mode or pl_module.monitor_mode
            inf = torch.tensor(torch.inf)
            self.kth_value, self.mode = (inf, "min") if mode == "min" else (-inf, "max")
        super().setup(trainer, pl_module, stage)
