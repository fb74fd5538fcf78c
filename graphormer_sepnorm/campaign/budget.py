"""The callback that makes a fit stop in time, resumable, and keeps each seed's best model.

:class:`CampaignCheckpoint` replaces a config's ``ModelCheckpoint`` in a campaign's fits:

- **Best models.** After each validation, every seed whose own validation metric improved has
  its model saved as ``best-seed<s>.ckpt`` (the single-run format that ``test`` and ``predict``
  take), with the step; each validation's values are kept as the job's history.
- **Stopping in time.** After each training batch it estimates what reaching the next point
  where it may stop would cost (steps, and any validation on the way) and, when that would pass
  the deadline, saves the resume point and raises :class:`BudgetSpent`. Every few minutes it
  also saves the resume point and goes on, so that a chunk killed anyway (a wrong estimate, a
  machine taken back) loses only the minutes since. It never stops where
  Lightning would validate next or at an epoch's last batch: Lightning skips a validation that
  was due when it resumes there, so the resumed fit would differ from an uninterrupted one.
  Resumed from such a point (and batches resume mid-epoch), a fit repeats the uninterrupted
  one exactly (``tests/campaign``).
"""

from __future__ import annotations

import time
from typing import Any

import lightning
import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from graphormer_sepnorm.campaign.state import JobState

__all__ = ["BudgetSpent", "CampaignCheckpoint", "validation_after"]

#: Seconds a compiled model's first validation in a process is assumed to spend compiling.
COMPILE_GUESS_S = 60.0
#: A step this many times slower than the running average is a one-off (a compile).
ONE_OFF = 5.0


class BudgetSpent(Exception):  # noqa: N818 (not an error: the budget ran out, state saved)
    """The fit stopped for the budget after saving its resume point."""


def validation_after(trainer: Trainer, ahead: int) -> bool:
    """Whether Lightning validates right after the training batch ``ahead`` past the current.

    Lightning's own rule (its ``_should_check_val_fx``) for step- and epoch-based validation,
    looked ahead: ``ahead=0`` is the batch just trained.
    """
    loop = trainer.fit_loop.epoch_loop
    if not trainer.enable_validation:
        return False
    batches = trainer.num_training_batches
    batch_idx, total_idx = loop.batch_idx + ahead, loop.total_batch_idx + ahead
    epoch = trainer.current_epoch + batch_idx // batches
    batch_idx %= batches
    every = trainer.check_val_every_n_epoch
    if every is not None and (epoch + 1) % every != 0:
        return False
    if trainer.val_check_batch == float("inf"):
        return batch_idx == batches - 1
    current = total_idx if every is None else batch_idx
    return (current + 1) % trainer.val_check_batch == 0


def _stoppable(trainer: Trainer, ahead: int) -> bool:
    last = (trainer.fit_loop.epoch_loop.batch_idx + ahead) % trainer.num_training_batches
    return not validation_after(trainer, ahead) and last != trainer.num_training_batches - 1


class CampaignCheckpoint(Callback):
    """Keeps each seed's best model and stops a fit, resumable, before its deadline.

    Args:
        job: the job's state folder.
        seeds: the fit's seeds (packed replicas in order, or the one seed).
        deadline: ``time.monotonic()`` by which the fit must have stopped and saved.
        max_steps: also stop once this many steps were trained in this fit (a budget in steps,
            for rehearsals); ``None``: no such limit.
        moments: dtype of AdamW's moments in the resume point.
        margin_s: seconds kept in hand for the unexpected. Default: 5.
        save_every_s: also save the resume point (and go on) at the first step where the fit
            may stop this many seconds after the last save, so that a chunk killed past its
            deadline loses at most this much; ``None``: only when stopping. Default: 180.
    """

    def __init__(self, job: JobState, seeds: list[int], deadline: float,
                 max_steps: int | None = None, moments: torch.dtype = torch.float32,
                 margin_s: float = 5.0, save_every_s: float | None = 180.0) -> None:
        self.job, self.seeds, self.deadline = job, list(seeds), deadline
        self.max_steps, self.moments, self.margin_s = max_steps, moments, margin_s
        self.save_every_s, self._saved_at = save_every_s, 0.0
        self.best: dict[str, dict[str, float]] = {}
        self.history: list[dict[str, Any]] = []
        self._step_s: float | None = None
        self._val_s: float | None = None
        self._save_s = 2.0
        self._slow_run = 0  # one-off slow steps in a row (see _observe)
        self._last = self._val_start = 0.0
        self.start_step = 0
        self.created = time.monotonic()
        #: seconds from this callback's making (the fit's setup) to the chunk's first step's
        #: end: loading the data, and compiling when the model compiles
        self.startup_s: float | None = None

    @property
    def steps_per_s(self) -> float | None:
        """The training steps' recent rate (an average over the last ten or so), if measured."""
        return 1 / self._step_s if self._step_s else None

    @property
    def val_seconds(self) -> float | None:
        """The last validation's seconds (with the statistics pass before it), if one ran."""
        return self._val_s

    def state_dict(self) -> dict[str, Any]:
        """Best values and history: a resumed fit compares with them."""
        return {"best": self.best, "history": self.history}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Takes the saved best values and history."""
        self.best, self.history = state_dict["best"], state_dict["history"]

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Starts the clocks; notes the step this fit starts from."""
        self.start_step, self._last = trainer.global_step, time.monotonic()
        self._saved_at = self._last

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        """Saves and raises :class:`BudgetSpent` when the next stop would come too late."""
        now = time.monotonic()
        step_s, self._last = now - self._last, now
        if self.startup_s is None:
            self.startup_s = now - self.created
            print(f"{self.job.folder.name}: first step of the chunk after {self.startup_s:.1f} s "
                  "(data, model, compilation)", flush=True)
        if trainer.global_step - self.start_step > 2:  # the first steps compile
            self._observe(step_s)
        if trainer.global_step >= trainer.max_steps > 0 or not _stoppable(trainer, 0):
            return
        steps_done = trainer.global_step - self.start_step
        if self.max_steps is not None and steps_done >= self.max_steps or \
                now + self._to_next_stop(trainer, pl_module, step_s) > self.deadline:
            self.save_resume(trainer)
            raise BudgetSpent(f"stopped at step {trainer.global_step}")
        if self.save_every_s is not None and now - self._saved_at >= self.save_every_s:
            self.save_resume(trainer)  # a chunk killed later resumes from here
            self._saved_at = time.monotonic()

    def _observe(self, step_s: float) -> None:
        """Folds a step's seconds into the running average, unless it was a one-off.

        Three slow steps in a row are no one-off: the pace changed, and the average restarts
        from the last of them.
        """
        if self._step_s is None:
            self._step_s = step_s
        elif step_s > ONE_OFF * self._step_s:
            self._slow_run += 1
            if self._slow_run >= 3:
                self._step_s, self._slow_run = step_s, 0
        else:
            self._step_s, self._slow_run = 0.9 * self._step_s + 0.1 * step_s, 0

    def step_estimate(self, step_s: float) -> float:
        """The seconds the coming steps are expected to take, the last one's ``step_s`` seen.

        The running average, or the last step where it was slower (the steps slowed down);
        but not a one-off: a step over :data:`ONE_OFF` times the average compiled or recorded
        a new shape (a padded length first seen), and the next steps do not repeat it (at most
        two in a row: a third restarts the average). Taken at face value, one such step before
        an unmeasured validation (estimated from the step) could stop a fit minutes early.
        """
        if self._step_s is None:
            return step_s
        return self._step_s if step_s > ONE_OFF * self._step_s else max(self._step_s, step_s)

    def _to_next_stop(self, trainer: Trainer, pl_module: LightningModule,
                      step_s: float) -> float:
        """Seconds to the next point where the fit may stop, saved, with the margin."""
        step = self.step_estimate(step_s)
        val = self._val_s
        if val is None:  # not measured yet: about a training step per validation batch, twice,
            # and a compiled model's first validation compiles its evaluation shapes
            val = 2 * step * (sum(trainer.num_val_batches or [0]) + 1)
            val += COMPILE_GUESS_S if getattr(pl_module, "_compiled", False) else 0.0
        seconds, ahead = 0.0, 1
        while True:
            seconds += step + (val if validation_after(trainer, ahead) else 0.0)
            if _stoppable(trainer, ahead) or ahead > trainer.num_training_batches:
                return seconds + self._save_s + self.margin_s
            ahead += 1

    def save_resume(self, trainer: Trainer) -> None:
        """Writes the resume point (Lightning's full checkpoint, cut per replica)."""
        started = time.monotonic()
        ckpt = trainer._checkpoint_connector.dump_checkpoint(weights_only=False)
        self.job.write_resume(ckpt, len(self.seeds), self.moments)
        self._save_s = max(1.0, 2 * (time.monotonic() - started))

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Times the validation (the graph-token statistics pass before it counts too)."""
        self._val_start = time.monotonic()

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Records the values; saves the seeds that improved."""
        now = time.monotonic()
        if trainer.sanity_checking:
            return
        self._val_s, self._last = now - self._val_start, now
        metric = pl_module.task.metric_name
        values = self._values(trainer, metric)
        self.history.append({"step": trainer.global_step, **values})
        rate = f", {1 / self._step_s:.1f} steps/s" if self._step_s else ""
        total = int(trainer.estimated_stepping_batches)
        print(f"{self.job.folder.name}: step {trainer.global_step}/{total} val/"
              f"{metric} " + " ".join(f"{v:.4f}" for v in values.values())
              + f" ({self._val_s:.1f} s{rate})", flush=True)
        lower = metric == "mae"
        for index, seed in enumerate(self.seeds):
            value, best = values[str(seed)], self.best.get(str(seed))
            if best is None or (value < best["val"] if lower else value > best["val"]):
                self.best[str(seed)] = {"val": value, "step": trainer.global_step}
                self.job.save_best(seed, _best_checkpoint(pl_module, index, seed, value,
                                                          trainer))

    def _values(self, trainer: Trainer, metric: str) -> dict[str, float]:
        metrics = trainer.callback_metrics
        if len(self.seeds) == 1:
            return {str(self.seeds[0]): float(metrics[f"val/{metric}"])}
        return {str(s): float(metrics[f"val/{metric}_seed{s}"]) for s in self.seeds}


def _best_checkpoint(module: LightningModule, index: int, seed: int, value: float,
                     trainer: Trainer) -> dict[str, Any]:
    """Seed ``seed``'s model as a single run's checkpoint (what ``test`` loads)."""
    metric = "val_" + module.task.metric_name
    if hasattr(module, "replica_checkpoint"):  # packed
        ckpt = module.replica_checkpoint(index)
        ckpt["replica"][metric] = value
        return ckpt
    return {"state_dict": {k: v.detach().cpu().clone() for k, v in module.state_dict().items()},
            "hyper_parameters": dict(module.hparams), "epoch": trainer.current_epoch,
            "global_step": trainer.global_step,
            "pytorch-lightning_version": lightning.__version__,
            "replica": {"seed": seed, metric: value}}
