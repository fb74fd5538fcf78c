"""A ``torch.profiler`` table of a few steps of a campaign's fit: where a lent GPU's step goes.

The first lease measured the single-model step at 41 steps/s where the roofline estimate said
about 470 (``benchmarks/README.md``), and a separate benchmark spends minutes of a lease
compiling a step the campaign compiles anyway (the second lease's ran out of time compiling).
So the campaign's own fit profiles a few of its steps, once per job and code, into the job's
state folder, which comes back with the state.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

__all__ = ["StepProfile", "profile_activities", "profile_report", "sync"]

#: The host calls that launch device work, or wait for it.
LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC",
            "cudaGraphLaunch", "cudaMemcpyAsync", "cudaStreamSynchronize",
            "cudaDeviceSynchronize")


def profile_report(profiler: torch.profiler.profile, title: str, steps: int) -> str:
    """Launches per step (kernels, CUDA graphs, copies, syncs) and the top operators."""
    events = profiler.key_averages()
    launches = {e.key: e.count / steps for e in events if e.key in LAUNCHES}
    sort = "self_device_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    table = events.table(sort_by=sort, row_limit=30, max_name_column_width=60)
    per_step = ", ".join(f"{k} {v:.1f}" for k, v in sorted(launches.items())) or "none"
    return f"## {title} ({steps} steps)\nper step: {per_step}\n{table}\n"


def profile_activities() -> list[torch.profiler.ProfilerActivity]:
    """The CPU's, and CUDA's where there is CUDA."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return activities


def sync() -> None:
    """Waits for the device's queued work, where there is CUDA (so that a clock reads it)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class StepProfile(Callback):
    """Profiles ``steps`` training steps, ``after`` steps into the fit, into ``path``.

    The report (:func:`profile_report`) starts with the steps' wall seconds; a fit that stops
    mid-profile (its budget spent) reports the steps it profiled. A profiler that fails writes
    its error instead, and the fit goes on.

    Args:
        path: the report's file.
        title: its heading (job and code).
        after: steps into the fit before profiling, past compilation and CUDA graph recording.
            Default: 50.
        steps: steps profiled. Default: 20.
    """

    def __init__(self, path: Path, title: str, after: int = 50, steps: int = 20) -> None:
        self.path, self.title, self.after, self.steps = Path(path), title, after, steps
        self._profiler: torch.profiler.profile | None = None
        self._first = self._started = 0
        self._clock = 0.0
        self._written = False  # a report (or the profiler's error) is in ``path``

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Notes the fit's first step, and whether an earlier chunk wrote the report.

        A resumed fit counts its steps from where it resumed; the file is looked at here, once,
        not at every step.
        """
        self._first, self._written = trainer.global_step, self.path.exists()

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any,
                             batch_idx: int) -> None:
        """Starts the profiler ``after`` steps into the fit."""
        if self._profiler is not None or self._written:
            return
        if trainer.global_step - self._first < self.after:
            return
        sync()
        self._profiler = torch.profiler.profile(activities=profile_activities())
        self._guard(self._profiler.__enter__)
        self._started, self._clock = trainer.global_step, time.perf_counter()

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        """Stops it after ``steps`` steps and writes the report."""
        if self._profiler is not None and trainer.global_step - self._started >= self.steps:
            self._finish(trainer.global_step - self._started)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """A fit that ended mid-profile reports what it profiled."""
        if self._profiler is not None:
            self._finish(trainer.global_step - self._started)

    def on_exception(self, trainer: Trainer, pl_module: LightningModule,
                     exception: BaseException) -> None:
        """So does a fit stopped by an exception (its budget spent, say)."""
        self.on_train_end(trainer, pl_module)

    def _finish(self, steps: int) -> None:
        profiler, self._profiler = self._profiler, None
        sync()
        seconds = time.perf_counter() - self._clock
        if not self._guard(lambda: profiler.__exit__(None, None, None)) or steps < 1:
            return
        head = f"{steps} steps in {seconds:.3f} s ({steps / seconds:.1f} steps/s, profiled)\n"
        self._guard(lambda: self._write(head + profile_report(profiler, self.title, steps)))

    def _guard(self, action: Any) -> bool:
        """Runs ``action``; a failure is written to the report's file instead of raised."""
        try:
            action()
        except Exception as error:  # noqa: BLE001 (a profile is not worth a lease's fit)
            self._profiler = None
            try:
                self._write(f"## {self.title}: the profiler failed: {error!r}\n")
            except OSError as unwritable:
                print(f"{self.title}: the profiler failed: {error!r}; {unwritable!r}",
                      file=sys.stderr, flush=True)
            return False
        return True

    def _write(self, text: str) -> None:
        # the job's state folder is made by its first save, which may come later
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(text)
        self._written = True
