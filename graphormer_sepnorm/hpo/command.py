"""``graphormer-sepnorm-hpo``: the search's command and its SLURM array.

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
import shlex
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
import yaml

from graphormer_sepnorm.cli import main as cli_main
from graphormer_sepnorm.experiment_results import grid_argv
from graphormer_sepnorm.hpo import space as spaces
from graphormer_sepnorm.hpo.study import claim_lock, open_storage
from graphormer_sepnorm.hpo.workers import Search, run_workers
from graphormer_sepnorm.jobs import seconds, slurm_preamble


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
    p.add_argument("--direction", choices=["minimize", "maximize"],
                   help="default: the task's (regression minimizes its MAE, classification "
                        "maximizes its ROC-AUC)")
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


def direction(args: argparse.Namespace, config: dict[str, Any]) -> str:
    """``--direction``, else the task's: minimize a regression's MAE, maximize a ROC-AUC."""
    if args.direction:
        return args.direction
    task = ((config.get("data") or {}).get("init_args") or {}).get("task", "regression")
    return "minimize" if task == "regression" else "maximize"


def open_study(args: argparse.Namespace, storage: str, config: dict[str, Any],
               space: dict[str, spaces.Param], overrides: list[str]) -> optuna.Study:
    """Creates the study with trial 0 queued (the recipe's values), or loads it."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    startup = args.random_trials or max(4, args.trials // 4)
    study = optuna.create_study(
        study_name=args.name, storage=open_storage(storage), direction=direction(args, config),
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
