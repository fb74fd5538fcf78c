"""``graphormer-sepnorm-experiment``: a grid of datasets x {SepNorm, ShareNorm} x seeds.

Each cell of the grid, a dataset, a norm and a seed (with ``--packed``: all the seeds of a
dataset and norm, trained together as packed replicas, ``--model.seeds``), is a
``graphormer-sepnorm fit`` that continues from the cell's ``last.ckpt`` when it has one
(``--ckpt_path last``), then a ``test`` of its best checkpoint (of each replica's), each command
a process of its own. Run folders go to ``runs/experiments/<name>/<cell>/``. A finished cell's
rows (one per seed) go to ``results/<name>.csv`` with the commit and the date, and
``results/<name>.md`` is rewritten from the whole CSV: mean ± std per dataset and norm, with
the hardware, the budget and the command. Cells already in the CSV are skipped and an
unfinished one continues from its ``last.ckpt``, so the same command continues a killed grid.

``--max-time DD:HH:MM:SS`` is this command's time for fitting: each fit gets what is left of it
(``--trainer.max_time``); one stopped by it ends the command, and the same command goes on.

``--slurm`` writes a SLURM job array instead, ``runs/experiments/<name>/array.sbatch``: a task
per unfinished cell, its fit (``--max-time`` is then each task's), its test, and ``--gather``,
which adds the finished cells' rows to the results. Submit it with ``sbatch``; cells a task
left unfinished (exit status 3) continue when ``--slurm`` and ``sbatch`` run again.

Cross-validation and replicate splits (a CSV dataset): ``--folds K`` makes a cell per fold of
each seed (``--data.split scaffold_folds``, or ``random_folds`` with ``--fold-split random``;
fold ``f`` is tested, ``f + 1`` validates, the seed draws the folds); ``--replicate-splits``
gives each seed its own random or scaffold split instead. The Markdown then has every test
metric (per task too) as mean ± std over the rows, and the command with which each seed's fold
models predict as one ensemble.

Exit status: 0 when every cell is done, 1 when a cell failed, 3 when cells are left.

Example:
    ``graphormer-sepnorm-experiment --name cpu_grid --configs configs/zinc_subset.yaml
    configs/molhiv.yaml --preset configs/presets/cpu_10min.yaml --seeds 0 1 2
    --accelerator cpu``
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from graphormer_sepnorm.cli import EXIT_UNFINISHED
from graphormer_sepnorm.experiment_results import (
    FIELDS,
    Cell,
    append_row,
    cell_rows,
    grid_argv,
    mean_std,
    read_rows,
    summary_table,
    write_markdown,
)
from graphormer_sepnorm.jobs import CLI, duration, logger_args, seconds, slurm_preamble, spawn

__all__ = ["FIELDS", "Cell", "append_row", "cells", "commands", "main", "mean_std",
           "read_rows", "slurm_script", "summary_table", "duration", "seconds", "spawn"]
NORMS = {"sepnorm": "true", "sharenorm": "false"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; see the module docstring."""
    p = argparse.ArgumentParser(prog="graphormer-sepnorm-experiment", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--name", required=True, help="results/<name>.csv and .md")
    p.add_argument("--configs", nargs="+", required=True, help="one dataset config each")
    p.add_argument("--preset", nargs="*", default=[], help="configs stacked on each dataset's")
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--norms", nargs="+", choices=sorted(NORMS), default=["sepnorm", "sharenorm"])
    p.add_argument("--accelerator", default="auto", help="cpu, gpu, auto")
    p.add_argument("--devices", default="1", help="per run, e.g. 1 or 2 (DDP)")
    p.add_argument("--max-steps", type=int, help="steps per run; the schedule ends there too")
    p.add_argument("--max-epochs", type=int, help="epochs per run (schedule from the trainer)")
    p.add_argument("--max-time", help="this command's (a SLURM task's) time to fit, DD:HH:MM:SS")
    p.add_argument("--packed", action="store_true",
                   help="train the seeds of each dataset and norm together in one fit")
    p.add_argument("--folds", type=int,
                   help="cross-validation: K fits a seed, fold f tested, f+1 validating")
    p.add_argument("--fold-split", choices=["scaffold", "random"], default="scaffold",
                   help="folds of whole scaffolds (default) or random folds")
    p.add_argument("--replicate-splits", action="store_true",
                   help="each seed also draws its own random or scaffold split (split_seed)")
    p.add_argument("--prepared", type=Path,
                   help="read each dataset's prepared splits from DIR/<dataset> (no RDKit)")
    p.add_argument("--results-dir", type=Path, default=Path("results"))
    p.add_argument("--runs-dir", type=Path, default=Path("runs/experiments"))
    p.add_argument("--slurm", action="store_true", help="write the SLURM job array, run nothing")
    p.add_argument("--sbatch", nargs="*", default=[],
                   help="options for the array's #SBATCH lines, without dashes: time=04:00:00")
    p.add_argument("--gather", action="store_true",
                   help="only add the finished cells' rows to the results")
    p.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                   help="further graphormer-sepnorm arguments for every run (last)")
    return p.parse_args(argv)


def cells(args: argparse.Namespace) -> list[Cell]:
    """The grid's cells, seeds outermost (a grid stopped early has every dataset and norm)."""
    if args.packed:
        return [Cell(c, n, tuple(args.seeds), True) for c in args.configs for n in args.norms]
    folds = [None] if args.folds is None else list(range(args.folds))
    return [Cell(c, n, (s,), fold=f) for s in args.seeds for f in folds for c in args.configs
            for n in args.norms]


def run_dir(args: argparse.Namespace, cell: Cell) -> Path:
    """``runs/experiments/<name>/<cell>``."""
    return args.runs_dir / args.name / cell.name


def budget_args(args: argparse.Namespace) -> list[str]:
    """Trainer (and schedule) overrides for the steps or epochs given on the command line."""
    out: list[str] = []
    if args.max_steps is not None:
        out += ["--trainer.max_steps", str(args.max_steps), "--model.total_steps",
                str(args.max_steps)]
    if args.max_epochs is not None:
        out += ["--trainer.max_epochs", str(args.max_epochs), "--model.total_steps", "null"]
        out += [] if args.max_steps is not None else ["--trainer.max_steps", "-1"]
    return out


def cli_args(args: argparse.Namespace, cell: Cell) -> list[str]:
    """The ``graphormer-sepnorm`` arguments shared by a cell's fit and tests."""
    out = ["--config", cell.config]
    if args.prepared is not None:  # before the rest: the model's seeds link into this class
        out += ["--data", "graphormer_sepnorm.datasets.PreparedDataModule",
                "--data.path", str(args.prepared / cell.dataset)]
    for preset in args.preset:
        out += ["--config", preset]
    folder, seed = run_dir(args, cell), str(cell.seeds[0])
    out += ["--seed_everything", seed, "--data.init_args.seed", seed,
            "--model.config.sepnorm", NORMS[cell.norm], "--trainer.accelerator", args.accelerator,
            "--trainer.devices", str(args.devices), "--trainer.enable_progress_bar", "false",
            *logger_args(folder)]
    return out + budget_args(args) + split_args(args, cell) + list(args.extra)


def split_args(args: argparse.Namespace, cell: Cell) -> list[str]:
    """A fold's split (``*_folds``, the seed's folds), or a replicate's own split seed."""
    seed = str(cell.seeds[0])
    if cell.fold is not None:
        return ["--data.init_args.split", f"{args.fold_split}_folds", "--data.init_args.num_folds",
                str(args.folds), "--data.init_args.fold", str(cell.fold),
                "--data.init_args.split_seed", seed]
    return ["--data.init_args.split_seed", seed] if args.replicate_splits else []


def commands(args: argparse.Namespace, cell: Cell, max_time: str | None) -> list[list[str]]:
    """The cell's fit, resumed from its ``last.ckpt`` if any, then its tests (Python args)."""
    shared, folder = cli_args(args, cell), run_dir(args, cell)
    fit = [*CLI, "fit", *shared, "--trainer.logger.init_args.version", "fit",
           "--ckpt_path", "last", "--test_best", "false"]
    fit += ["--model.seeds", json.dumps(list(cell.seeds))] if cell.packed else []
    fit += ["--trainer.max_time", max_time] if max_time else []
    if not cell.packed:
        return [fit, [*CLI, "test", *shared, "--trainer.logger.init_args.version", "test",
                      "--ckpt_path", "best"]]
    return [fit, *([*CLI, "test", *shared, "--trainer.logger.init_args.version",
                    f"test-seed{s}", "--ckpt_path", str(folder / "fit/replicas" / f"seed{s}.ckpt")]
                   for s in cell.seeds)]


def run_cell(args: argparse.Namespace, cell: Cell, deadline: float | None) -> str:
    """Fits and tests one cell here and adds its rows; ``done``, ``unfinished`` or ``failed``."""
    folder = run_dir(args, cell)
    folder.mkdir(parents=True, exist_ok=True)
    left = None if deadline is None else deadline - time.monotonic()
    if left is not None and left < 1:
        return "unfinished"
    fit, *tests = commands(args, cell, None if left is None else duration(left))
    status, rss = spawn(fit, folder / "fit.log")
    if status == EXIT_UNFINISHED:
        return "unfinished"
    for k, test in enumerate(tests):
        if status == 0:
            status, _ = spawn(test, folder / f"test{k}.log")
    if status != 0:
        print(f"{cell.name} failed (exit {status}); see {folder}", file=sys.stderr)
        return "failed"
    gather(args, {cell: {"peak_rss_mb": "" if rss is None else round(rss)}})
    return "done"


def results_csv(args: argparse.Namespace) -> Path:
    """``results/<name>.csv``."""
    return args.results_dir / f"{args.name}.csv"


def finished(args: argparse.Namespace) -> set[tuple[str, str, str, str]]:
    """``(dataset, norm, seed, fold)`` of every row in the CSV."""
    return {(r["dataset"], r["norm"], r["seed"], r.get("fold") or "")
            for r in read_rows(results_csv(args))}


def left_to_run(args: argparse.Namespace,
                done: set[tuple[str, str, str, str]] | None = None) -> list[Cell]:
    """The cells with a row not in the CSV (or not in ``done``, when given)."""
    done = finished(args) if done is None else done
    return [c for c in cells(args) if any(key not in done for key in c.keys())]


def gather(args: argparse.Namespace, extra: dict[Cell, dict[str, object]] | None = None) -> None:
    """Adds the rows of finished cells not in the CSV yet; rewrites the Markdown."""
    csv_path, done = results_csv(args), finished(args)
    accelerator = args.accelerator + (f", packed x{len(args.seeds)}" if args.packed else "")
    for cell in left_to_run(args, done):
        for row, key in zip(cell_rows(run_dir(args, cell), cell) or [], cell.keys(),
                            strict=False):
            if key not in done:
                append_row(csv_path, {**row, "accelerator": accelerator,
                                      **(extra or {}).get(cell, {})})
    if csv_path.is_file():
        write_markdown(args, read_rows(csv_path))


def slurm_script(args: argparse.Namespace, todo: list[Cell]) -> str:
    """The job array: a task per cell of ``todo``, then the gathering of the results."""
    comment = ["Written by graphormer-sepnorm-experiment --slurm. Task i: cell i's fit, continued",
               "from its last.ckpt (--ckpt_path last), then the test of its best checkpoint, then",
               f"the finished cells' rows into {args.results_dir}/{args.name}.csv and .md. A fit",
               "stopped by --trainer.max_time exits 3: run --slurm and sbatch again to go on."]
    lines = [*slurm_preamble(args.name, args.runs_dir / args.name, len(todo), args.sbatch,
                             comment), 'case "$SLURM_ARRAY_TASK_ID" in']
    for k, cell in enumerate(todo):
        lines.append(f"{k})  # {cell.name}")
        lines += [f'    "$PYTHON" {shlex.join(cmd)}' for cmd in commands(args, cell, args.max_time)]
        lines.append("    ;;")
    gather_cmd = ["-m", "graphormer_sepnorm.experiment", "--gather", *grid_argv(args.argv)]
    return "\n".join([*lines, "esac", f'"$PYTHON" {shlex.join(gather_cmd)}', ""])


def run_grid(args: argparse.Namespace) -> int:
    """Runs the cells left here, in order, within ``--max-time``; the exit status."""
    deadline = None if args.max_time is None else time.monotonic() + seconds(args.max_time)
    failed = False
    for cell in left_to_run(args):
        state = run_cell(args, cell, deadline)
        failed = failed or state == "failed"
        if state == "unfinished":
            print(f"{cell.name}: unfinished; the same command continues it", file=sys.stderr)
            return 1 if failed else EXIT_UNFINISHED
    gather(args)  # also when every cell was done already: the table shows this command
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Runs the grid, writes its SLURM array or gathers its results; the exit status."""
    args = parse_args(argv)
    if args.folds is not None and (args.packed or args.folds < 3):
        raise SystemExit("graphormer-sepnorm-experiment: --folds takes at least 3 folds, and "
                         "not --packed")
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    if args.gather:
        gather(args)
        return 0
    if not args.slurm:
        return run_grid(args)
    todo = left_to_run(args)
    if not todo:
        print("every cell is done")
        return 0
    path = args.runs_dir / args.name / "array.sbatch"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(slurm_script(args, todo))
    print(f"{len(todo)} cell(s): sbatch {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
