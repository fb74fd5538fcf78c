"""One job's work: a chunk of its fit (until done or out of budget), then its seeds' tests."""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback
from lightning.pytorch.callbacks import ModelCheckpoint

from graphormer_sepnorm.campaign.budget import BudgetSpent, CampaignCheckpoint
from graphormer_sepnorm.campaign.plan import Job
from graphormer_sepnorm.campaign.state import JobState, atomic_save
from graphormer_sepnorm.campaign.step_profile import StepProfile

__all__ = ["Options", "fit_chunk", "test_seeds"]


@dataclass(frozen=True)
class Options:
    """How this command runs the plan's jobs (not part of any recipe).

    Attributes:
        prepared: read each dataset from ``prepared/<dataset>`` (prepared splits); ``None``:
            from the config's datamodule under ``data_root``.
        data_root: the datamodules' data root when not ``prepared``.
        accelerator: ``cpu``, ``gpu`` or ``auto``.
        scratch: folder for the fits' logs and the resume checkpoint handed to Lightning.
        moments: dtype of AdamW's moments in resume points.
        save_every_s: seconds between a fit's resume points while it trains (besides the one
            where it stops); ``None``: only where it stops.
        profile: steps into each job's fit, and steps profiled then, once per job and
            ``code``, into ``profile-<code>.txt`` in its state folder (:mod:`.step_profile`);
            0 steps: none.
        code: the code's commit, for those files' names.
    """

    prepared: Path | None
    data_root: str
    accelerator: str
    scratch: Path
    moments: torch.dtype = torch.float32
    save_every_s: float | None = 180.0
    profile: tuple[int, int] = (50, 0)
    code: str = "unknown"


def _arguments(job: Job, options: Options, seed: int | None = None) -> list[str]:
    """The job's recipe, then where its data is and how this machine runs it."""
    recipe = job.recipe(seed)
    configs = 2 * len(job.configs)  # the recipe starts with its --config pairs
    data = ["--data.init_args.root", options.data_root]
    if options.prepared is not None:  # before the rest: the model's seeds link into this class
        data = ["--data", "graphormer_sepnorm.datasets.PreparedDataModule",
                "--data.path", str(options.prepared / job.dataset)]
    out = recipe[:configs] + data + recipe[configs:]
    out += ["--trainer.accelerator", options.accelerator, "--trainer.devices", "1",
            "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
            "--trainer.logger.class_path", "lightning.pytorch.loggers.CSVLogger",
            "--trainer.logger.init_args.save_dir", str(options.scratch),
            "--trainer.logger.init_args.name", job.name,
            "--trainer.default_root_dir", str(options.scratch)]
    return out + (["--model.compile", "null"] if seed is not None else [])


def _val_interval(trainer: Any) -> str:
    every = trainer.check_val_every_n_epoch
    if every is None:
        return f"every {trainer.val_check_batch} steps"
    per = trainer.num_training_batches
    return f"every {every} epoch(s) ({every * per} steps)"


def fit_chunk(job: Job, state: JobState, options: Options, deadline: float,
              max_steps: int | None) -> tuple[bool, int]:
    """Fits ``job`` from its resume point until it ends or the budget does.

    Returns:
        Whether the fit finished, and the steps trained in this chunk.
    """
    from graphormer_sepnorm.cli import instantiate

    callback = CampaignCheckpoint(state, list(job.seeds), deadline, max_steps, options.moments,
                                  save_every_s=options.save_every_s)
    callbacks: list[Callback] = [callback]
    after, steps = options.profile
    if steps:
        callbacks.append(StepProfile(state.folder / f"profile-{options.code}.txt",
                                     f"{job.name} at {options.code}", after, steps))
    cli = instantiate(_arguments(job, options), callbacks)
    trainer = cli.trainer
    # the campaign keeps the best models and the resume point; no full checkpoints besides
    trainer.callbacks = [c for c in trainer.callbacks if not isinstance(c, ModelCheckpoint)]
    resume = state.read_resume()
    ckpt_path = None
    if resume is not None:
        ckpt_path = options.scratch / f"{job.name}-resume.ckpt"
        atomic_save(resume, ckpt_path)
    started, finished = time.monotonic(), True
    try:
        trainer.fit(cli.model, cli.datamodule, ckpt_path=ckpt_path)
    except BudgetSpent:
        finished = False
    finally:
        if ckpt_path is not None:
            ckpt_path.unlink(missing_ok=True)
    status = state.status
    status["chunks"] += 1
    status["fit_seconds"] += time.monotonic() - started
    status["best"], status["history"] = callback.best, callback.history
    status["val_seconds"] = callback.val_seconds
    status["val_interval"] = _val_interval(trainer)
    steps = trainer.global_step - callback.start_step
    rate = callback.steps_per_s
    status.setdefault("chunk_log", []).append({
        "start_step": callback.start_step, "steps": steps,
        "seconds": round(time.monotonic() - callback.created, 1),  # setup included
        "startup_s": None if callback.startup_s is None else round(callback.startup_s, 1),
        "steps_per_s": None if rate is None else round(rate, 2), "code": options.code})
    if finished:
        status.update(phase="test", steps=trainer.global_step)
    state.save_status()
    return finished, steps


def test_seeds(job: Job, state: JobState, options: Options) -> list[dict[str, Any]]:
    """Tests each seed's best model alone; the results' rows (without device and commit).

    One model and datamodule serve every seed (a seed changes only the weights loaded).
    """
    from graphormer_sepnorm.cli import instantiate

    cli = instantiate(_arguments(job, options, job.seeds[0]), [])
    metric = cli.model.task.metric_name
    rows = []
    for seed in job.seeds:
        best = state.status["best"].get(str(seed))
        if best is None:
            raise RuntimeError(f"{job.name}: seed {seed} was never validated; no best model")
        cli.trainer.test(cli.model, cli.datamodule, ckpt_path=state.best_path(seed),
                         weights_only=True, verbose=False)
        rows.append({"dataset": job.dataset, "norm": job.norm, "seed": seed,
                     "monitor": f"val/{metric}", "best_val": best["val"],
                     "best_step": best["step"], "test_metric": f"test/{metric}",
                     "test_value": float(cli.trainer.callback_metrics[f"test/{metric}"]),
                     "steps": state.status["steps"],
                     "fit_seconds": round(state.status["fit_seconds"], 1),
                     "chunks": state.status["chunks"],
                     "val_interval": state.status["val_interval"], "job": job.name})
    return rows


def scratch_folder() -> Path:
    """A fresh temporary folder for logs (``$TMPDIR``)."""
    return Path(tempfile.mkdtemp(prefix="campaign-", dir=os.environ.get("TMPDIR")))
