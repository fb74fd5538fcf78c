"""The workers of ``graphormer-sepnorm-hpo``: claim a trial, run its fit, tell its end.

A worker is a thread of the command; each trial's fit is a process of its own
(:func:`~graphormer_sepnorm.jobs.spawn`), so that memory goes back after every trial and at most
``--workers`` fits run at once. Claims and tells are made under the study's claim lock
(:mod:`~graphormer_sepnorm.hpo.study`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import optuna

from graphormer_sepnorm.cli import EXIT_UNFINISHED
from graphormer_sepnorm.hpo import space as spaces
from graphormer_sepnorm.hpo.results import write_reports
from graphormer_sepnorm.hpo.study import (
    Claim,
    Heartbeat,
    claim_lock,
    counted,
    release,
    stale_trial,
    trial_dir,
    trial_handle,
    write_heartbeat,
)
from graphormer_sepnorm.jobs import CLI, duration, logger_args, spawn

__all__ = ["PRUNING", "Search", "child_env", "fit_command", "next_claim", "run_trial",
           "run_workers", "tell", "work"]

#: The callback each trial's fit reports through.
PRUNING = "graphormer_sepnorm.hpo.pruning.TrialPruning"


@dataclass
class Search:
    """What the workers of one command share."""

    args: argparse.Namespace
    overrides: list[str]
    folder: Path
    storage: str
    study: optuna.Study
    space: dict[str, spaces.Param]
    cache: list[str]
    deadline: float | None
    stopping: threading.Event = field(default_factory=threading.Event)
    failed: list[int] = field(default_factory=list)


def next_claim(search: Search) -> Claim | None:
    """A stale trial to continue, else a new one while the study has fewer than N.

    Under the claim lock: no two workers get the same trial, and no more than N are asked for.
    """
    args = search.args
    with claim_lock(search.folder):
        claim = stale_trial(search.study, search.folder, 10 * args.heartbeat)
        if claim is not None or counted(search.study) >= args.trials:
            return claim
        trial = search.study.ask()
        params = spaces.suggest(trial, search.space)
        write_heartbeat(trial_dir(search.folder, trial.number))
        return Claim(trial.number, params, False)


def fit_command(search: Search, claim: Claim, left: float | None) -> list[str]:
    """The trial's fit, continued from its ``last.ckpt`` if it has one (Python arguments)."""
    where, args = trial_dir(search.folder, claim.number), search.args
    pruning = {"class_path": PRUNING, "init_args": {
        "storage": search.storage, "study": args.name, "trial": claim.number,
        "result": str(where / "result.json"), "n_startup_trials": args.prune_startup,
        "n_warmup_steps": args.prune_warmup, "prune": not args.no_prune}}
    cmd = [*CLI, "fit", *(a for c in args.config for a in ("--config", c)), *search.overrides,
           *search.cache, *spaces.overrides(claim.params), *logger_args(where, "fit"),
           "--ckpt_path", "last", "--test_best", "false", "--trainer.enable_progress_bar",
           "false", f"--trainer.callbacks+={json.dumps(pruning)}"]
    return cmd + (["--trainer.max_time", duration(left)] if left is not None else [])


def child_env(workers: int) -> dict[str, str]:
    """This environment, with the cores shared out between the workers' fits."""
    env = dict(os.environ)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    env.setdefault("OMP_NUM_THREADS", str(max(1, (cores or 1) // workers)))
    return env


def tell(search: Search, claim: Claim, status: int, rss: float | None) -> str:
    """Tells the study how the trial's fit ended; its state's name."""
    where, study = trial_dir(search.folder, claim.number), search.study
    result = where / "result.json"
    state, value = optuna.trial.TrialState.FAIL, None
    if status == 0 and result.is_file():
        outcome = json.loads(result.read_text())
        handle = trial_handle(study, claim.number)
        handle.set_user_attr("metric", outcome["metric"])
        if rss is not None:
            handle.set_user_attr("peak_rss_mb", round(rss))
        value = outcome["value"]
        if outcome["pruned"]:
            state = optuna.trial.TrialState.PRUNED
        elif value is not None and math.isfinite(value):
            state = optuna.trial.TrialState.COMPLETE
    study.tell(claim.number, value if state == optuna.trial.TrialState.COMPLETE else None,
               state=state, skip_if_finished=True)
    return state.name


def run_trial(search: Search, claim: Claim, worker: int) -> str:
    """Runs (or continues) the claimed trial's fit and tells its end.

    Returns:
        ``done``, ``unfinished`` (the trial released for the next worker) or ``failed``.
    """
    where = trial_dir(search.folder, claim.number)
    status, rss = 0, None
    if not (claim.resumed and (where / "result.json").is_file()):  # else: told, not yet seen
        left = None if search.deadline is None else search.deadline - time.monotonic()
        if left is not None and left < 1:
            release(where)
            return "unfinished"
        log = where / f"fit-{len(list(where.glob('fit-*.log'))) + 1}.log"
        print(f"worker {worker}: trial {claim.number} "
              f"{'continued' if claim.resumed else 'started'}: {claim.params}", flush=True)
        with Heartbeat(where, search.args.heartbeat):
            status, rss = spawn(fit_command(search, claim, left), log,
                                child_env(search.args.workers))
        if status == EXIT_UNFINISHED or (status != 0 and search.stopping.is_set()):
            release(where)
            return "unfinished"
    with claim_lock(search.folder):
        state = tell(search, claim, status, rss)
        write_reports(search.study, search.folder)
    value = search.study.get_trials(deepcopy=False)[claim.number].value
    print(f"worker {worker}: trial {claim.number} {state}"
          f"{'' if value is None else f' {value:.6g}'}", flush=True)
    if state == "FAIL":
        print(f"trial {claim.number} failed (exit {status}); see {where}", file=sys.stderr)
        search.failed.append(claim.number)
    return "failed" if state == "FAIL" else "done"


def work(search: Search, worker: int) -> bool:
    """One worker: trials until the study has N or time is up; whether it finished."""
    while not search.stopping.is_set():
        claim = next_claim(search)
        if claim is None:
            return True
        if run_trial(search, claim, worker) == "unfinished":
            return False
    return False


def run_workers(search: Search) -> int:
    """The workers in threads (each trial a process); the exit status."""
    def stop(signum: int, frame: object) -> None:
        search.stopping.set()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    with ThreadPoolExecutor(search.args.workers) as pool:
        futures = [pool.submit(work, search, k) for k in range(search.args.workers)]
        try:
            finished = [f.result() for f in futures]
        except KeyboardInterrupt:
            search.stopping.set()
            finished = [False]
    signal.signal(signal.SIGTERM, previous)
    best = search.folder / "best.yaml"
    if best.is_file():
        print(f"best so far: {best}\n{best.read_text()}", end="")
    if search.failed:
        return 1
    return 0 if all(finished) else EXIT_UNFINISHED
