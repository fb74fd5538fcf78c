"""``graphormer-sepnorm-hpo``: the search's command, its workers and its SLURM array.

::

    graphormer-sepnorm-hpo --name NAME --config RECIPE [config overrides...] --trials N
        [--space SPACE.yaml] [--workers W] [--max-time DD:HH:MM:SS] [--slurm --sbatch ...]

Arguments it does not know (``--data.path my.csv``) go to every trial's fit, after the recipe
(further ``--config`` files stack on it). Trial 0 runs the recipe's own values (with those
overrides); the others are Optuna's TPE sampler's. ``--workers W`` runs W trials at once here,
each fit a process of its own (its threads: the cores shared out, unless ``OMP_NUM_THREADS``
is set). The same command again continues the study until it has N trials. ``--slurm`` writes
``runs/hpo/NAME/array.sbatch``, W tasks that are workers of the same study.

Exit status: 0 when the study has its trials, 1 when a trial failed, 3 when ``--max-time``
stopped a fit (the same command continues it), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import shlex
import signal
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import yaml

from graphormer_sepnorm.cli import EXIT_UNFINISHED
from graphormer_sepnorm.cli import main as cli_main
from graphormer_sepnorm.experiment_results import grid_argv
from graphormer_sepnorm.hpo import space as spaces
from graphormer_sepnorm.hpo.results import write_reports
from graphormer_sepnorm.hpo.study import (
    Claim,
    Heartbeat,
    claim_lock,
    counted,
    open_storage,
    release,
    stale_trial,
    trial_dir,
    trial_handle,
    write_heartbeat,
)
from graphormer_sepnorm.jobs import CLI, duration, logger_args, seconds, slurm_preamble, spawn

PRUNING = "graphormer_sepnorm.hpo.pruning.TrialPruning"


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The command's options, and the overrides it passes on to every fit."""
    p = argparse.ArgumentParser(prog="graphormer-sepnorm-hpo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                allow_abbrev=False)
    p.add_argument("--name", required=True, help="the study: runs/hpo/NAME/")
    p.add_argument("--config", action="append", required=True,
                   help="the recipe (a second --config stacks on it)")
    p.add_argument("--space", help="the search space's YAML, or the name of a bundled one "
                                   "(default: the recipe's, e.g. smiles_csv)")
    p.add_argument("--trials", type=int, required=True, help="trials in the study, all told")
    p.add_argument("--workers", type=int, default=1, help="trials at once (SLURM: tasks)")
    p.add_argument("--storage", help="a database URL (default: runs/hpo/NAME/study.journal)")
    p.add_argument("--runs-dir", type=Path, default=Path("runs/hpo"))
    p.add_argument("--direction", choices=["minimize", "maximize"], default="minimize")
    p.add_argument("--max-time", help="this command's (a SLURM task's) time, DD:HH:MM:SS")
    p.add_argument("--prune-startup", type=int, default=5,
                   help="the median pruner prunes nothing before this many trials finished")
    p.add_argument("--prune-warmup", type=int, default=10,
                   help="nor in a trial's first this many epochs")
    p.add_argument("--no-prune", action="store_true", help="report, never prune")
    p.add_argument("--random-trials", type=int,
                   help="trials sampled at random before TPE (default: max(4, trials/4))")
    p.add_argument("--heartbeat", type=float, default=60.0,
                   help="seconds between heartbeats; a trial silent 10 times as long is stale")
    p.add_argument("--feature-cache", default=None,
                   help="folder of featurized molecules, shared by the trials (default: "
                        "runs/hpo/NAME/features; 'none' for none)")
    p.add_argument("--slurm", action="store_true", help="write the SLURM array, run nothing")
    p.add_argument("--sbatch", nargs="*", default=[],
                   help="options for the array's #SBATCH lines, without dashes: time=04:00:00")
    args, extra = p.parse_known_args(argv)
    if args.trials < 1 or args.workers < 1:
        p.error("--trials and --workers must be at least 1")
    return args, extra


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


def resolved_config(args: argparse.Namespace, overrides: list[str]) -> dict[str, Any]:
    """The fit's whole configuration: ``--print_config`` of the recipe and the overrides.

    Parsed by the fit's own parser, in this process, before any trial runs: a key the fit does
    not take stops the command here, with the parser's message.
    """
    configs = [a for c in args.config for a in ("--config", c)]
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
            cli_main(["fit", *configs, *overrides, "--print_config"])
    except SystemExit as e:
        if e.code not in (0, None):
            raise SystemExit("graphormer-sepnorm-hpo: the recipe and overrides do not resolve "
                             "(the fit's parser says why above)") from None
    return yaml.safe_load(printed.getvalue())


def space_path(args: argparse.Namespace) -> Path:
    """``--space`` as a file, a bundled name, or the recipe's bundled space."""
    given = args.space or Path(args.config[0]).stem
    if Path(given).is_file():
        return Path(given)
    bundled = spaces.bundled_space(given)
    if bundled is None:
        raise SystemExit(f"graphormer-sepnorm-hpo: no search space {given!r} (a file, or a "
                         "bundled one: smiles_csv); pass --space")
    return bundled


def open_study(args: argparse.Namespace, storage: str, config: dict[str, Any],
               space: dict[str, spaces.Param], overrides: list[str]) -> optuna.Study:
    """Creates the study with trial 0 queued (the recipe's values), or loads it."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    startup = args.random_trials or max(4, args.trials // 4)
    study = optuna.create_study(
        study_name=args.name, storage=open_storage(storage), direction=args.direction,
        sampler=optuna.samplers.TPESampler(n_startup_trials=startup, constant_liar=True),
        pruner=optuna.pruners.MedianPruner(args.prune_startup, args.prune_warmup),
        load_if_exists=True)
    if "keys" in study.user_attrs:
        if sorted(study.user_attrs["keys"]) != sorted(space):
            raise SystemExit(f"graphormer-sepnorm-hpo: study {args.name!r} searches "
                             f"{sorted(study.user_attrs['keys'])}, not this space; pick "
                             "another --name")
        return study
    recipe = spaces.recipe_values(config, space)
    for key, value in recipe.items():
        if not spaces.contains(space[key], value):
            raise SystemExit(f"graphormer-sepnorm-hpo: the recipe's {key} = {value!r} lies "
                             "outside the search space; widen the space to include it")
    for name, value in {"configs": args.config, "overrides": overrides, "recipe": recipe,
                        "keys": {k: spaces.resolve(config, k)[0] for k in space}}.items():
        study.set_user_attr(name, value)
    study.enqueue_trial(recipe)
    return study


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


def slurm_script(args: argparse.Namespace, argv: list[str]) -> str:
    """The job array: ``--workers`` tasks, each a worker of the study (``--workers 1``)."""
    own = grid_argv(argv)
    keep = [a for k, a in enumerate(own) if a != "--workers" and (k == 0 or own[k - 1]
                                                                  != "--workers")]
    folder = args.runs_dir / args.name
    comment = ["Written by graphormer-sepnorm-hpo --slurm. Each task is a worker of the study",
               f"{folder}: it runs trials until the study has {args.trials}, continuing any",
               "trial whose worker died from its last.ckpt. A task stopped by --max-time exits",
               "3: sbatch this script again to go on."]
    worker = ["-m", "graphormer_sepnorm.hpo.command", *keep, "--workers", "1"]
    return "\n".join([*slurm_preamble(args.name, folder, args.workers, args.sbatch, comment),
                      f'"$PYTHON" {shlex.join(worker)}', ""])


def main(argv: list[str] | None = None) -> int:
    """Runs the search here, or writes its SLURM array; the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args, overrides = parse_args(argv)
    folder = args.runs_dir / args.name
    folder.mkdir(parents=True, exist_ok=True)
    space = spaces.load_space(space_path(args))
    config = resolved_config(args, overrides)
    spaces.check_pretrained(config, space)
    if args.slurm:
        path = folder / "array.sbatch"
        path.write_text(slurm_script(args, argv))
        print(f"{args.workers} worker(s): sbatch {path}")
        return 0
    storage = args.storage or str(folder / "study.journal")
    with claim_lock(folder):
        study = open_study(args, storage, config, space, overrides)
    cache: list[str] = []
    data = config.get("data", {})
    if args.feature_cache != "none" and "cache_dir" in (data.get("init_args") or {}) \
            and data["init_args"]["cache_dir"] is None:
        cache = ["--data.init_args.cache_dir", args.feature_cache or str(folder / "features")]
    deadline = None if args.max_time is None else time.monotonic() + seconds(args.max_time)
    search = Search(args, overrides, folder, storage, study, space, cache, deadline)
    return run_workers(search)


if __name__ == "__main__":
    sys.exit(main())
