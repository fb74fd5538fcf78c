r"""Small-data benchmark: ours against chemprop 2.3.1 with its defaults, same splits, several seeds.

For each set (``<data-dir>/<set>.csv`` with columns ``smiles``, ``y``, ``split``; made by
``benchmarks/public_sets.py`` and ``benchmarks/small_sets.py``), each seed and each method, one
training run on one thread, then its test MAE and RMSE (in the target's units) and wall time:

- ``chemprop``: ``chemprop train --data-path X --task-type regression --smiles-columns smiles
  --target-columns y --splits-column split --pytorch-seed S --num-workers 0`` (all else
  default: 50 epochs, the best validation epoch's model tested), from its own venv
  (``--chemprop``; ``python3 -m venv .venv-chemprop && .venv-chemprop/bin/pip install -c
  constraints.txt chemprop==2.3.1``). MAE and RMSE come from its ``test_predictions.csv``.
- ``chemprop_rdkit2d``: the same with ``--molecule-featurizers rdkit_2d`` (chemprop's RDKit 2D
  descriptors beside the learned representation, standardized on the training split);
  ``chemprop_rdkit2d_norm`` with chemprop v1's CDF-normalized descriptors instead
  (``benchmarks/_chemprop_side.py`` says exactly what each adds).
- ``ours``: ``graphormer-sepnorm fit --config configs/smiles_csv.yaml --data.path X
  --data.target_columns '[y]' --data.split column --seed_everything S``, the command a user
  runs; test metrics of the best checkpoint from the run's ``metrics.csv``.
- ``gp``: the fingerprint GP the default config blends in, alone (``benchmarks/_gp_alone.py``:
  fitted on the training rows, no seed; one row per seed all the same).
- further variants of ours: ``--variant NAME='EXTRA ARGS'`` (repeatable) appends the extra
  arguments to ours' command, e.g. ``--variant scratch='--model.init_from none'``.

Every run is one row of ``--results`` (CSV, appended as runs end); a (set, method, seed) already
there is skipped, so an interrupted benchmark resumes where it stopped (``--rerun`` repeats).
At the end (and with ``--report-only``) a table of mean +- std over seeds is printed and written
to the ``.md`` beside the CSV.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/small_data.py --methods chemprop ours
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import resource
import shlex
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from graphormer_sepnorm.experiment import append_row, read_rows

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _chemprop_side as chemprop_side  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SETS = ["solubility", "freesolv", "ace_chembl1862_ki", "ace_chembl219_ki", "rdkit_chembl2321810"]
FIXED = [*chemprop_side.METHODS, "gp"]  # the methods that are not variants of ours
FIELDS = ["set", "method", "seed", "test_mae", "test_rmse", "val_mae", "minutes", "cpu_minutes",
          "n_train", "n_val", "n_test", "command", "run_dir", "commit", "finished",
          *(UNCERTAINTY := ["coverage90", "nll", "std_error_spearman"])]


def upgrade_results(path: Path) -> None:
    """Rewrites a results CSV of an older header with today's :data:`FIELDS` (new ones empty)."""
    rows = read_rows(path)
    if not rows or list(rows[0]) == FIELDS:
        return
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows({k: row.get(k, "") for k in FIELDS} for row in rows)


def read_set(path: Path) -> tuple[list[str], list[float], list[str]]:
    """SMILES, targets and split labels of a benchmark CSV."""
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [r["smiles"] for r in rows], [float(r["y"]) for r in rows], [r["split"] for r in rows]


def one_thread_env() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                 "NUMEXPR_NUM_THREADS"):
        env[name] = "1"
    return env


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_logged(command: list[str], log: Path, cwd: Path = ROOT) -> tuple[float, float]:
    """Runs ``command`` in ``cwd``, stdout and stderr to ``log``; wall and CPU seconds.

    The CPU time (user + system of the command and its children) is kept beside the wall time:
    on a shared machine the wall time grows with the load of other processes, the CPU time much
    less.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    started, cpu = time.perf_counter(), _children_cpu()
    with open(log, "w") as handle:
        handle.write(shlex.join(command) + "\n\n")
        handle.flush()
        code = subprocess.call(command, stdout=handle, stderr=subprocess.STDOUT, cwd=cwd,
                               env=one_thread_env())
    seconds, cpu = time.perf_counter() - started, _children_cpu() - cpu
    if code != 0:
        raise RuntimeError(f"exit status {code}: {shlex.join(command)} (log: {log})")
    return seconds, cpu


def run_gp(data: Path, run_dir: Path) -> tuple[float, float, tuple[float, float], list[str]]:
    """Test MAE, RMSE, (wall, CPU) seconds and the command of the GP alone."""
    command = [sys.executable, str(ROOT / "benchmarks" / "_gp_alone.py"), str(data)]
    log = run_dir / "run.log"
    times = run_logged(command, log)
    result = json.loads(log.read_text().strip().splitlines()[-1])
    return result["test_mae"], result["test_rmse"], times, command


def has_logged(metrics_csv: Path, name: str) -> bool:
    """Whether a Lightning ``metrics.csv`` has a column ``name`` with a value."""
    with open(metrics_csv, newline="") as handle:
        return any(row.get(name) for row in csv.DictReader(handle))


def logged(metrics_csv: Path, name: str) -> list[float]:
    """Every logged value of ``name`` in a Lightning ``metrics.csv``, in order."""
    with open(metrics_csv, newline="") as handle:
        values = [float(r[name]) for r in csv.DictReader(handle) if r.get(name)]
    if not values:
        raise RuntimeError(f"{metrics_csv} has no {name}")
    return values


def run_ours(args: argparse.Namespace, data: Path, seed: int, run_dir: Path, extra: str
             ) -> tuple[float, float, tuple[float, float], list[str], float]:
    """Test MAE, RMSE, (wall, CPU) seconds, the command and the best val MAE of one fit."""
    command = [*shlex.split(args.graphormer), "fit", "--config", str(args.config),
               "--data.path", str(data), "--data.target_columns", "[y]",
               "--data.split", "column", "--seed_everything", str(seed),
               "--trainer.logger.init_args.save_dir", str(run_dir.parent),
               "--trainer.logger.init_args.name", "",
               "--trainer.logger.init_args.version", run_dir.name,
               *shlex.split(extra)]
    times = run_logged(command, run_dir.parent / f"{run_dir.name}.log", args.workdir)
    metrics = run_dir / "metrics.csv"
    # a model with the GP blend is scored on it (test/mae is then its network alone)
    blend = "_blend" if has_logged(metrics, "test/mae_blend") else ""
    return (logged(metrics, f"test/mae{blend}")[-1], logged(metrics, f"test/rmse{blend}")[-1],
            times, command, min(logged(metrics, "val/mae")))


def uncertainty(run_dir: Path) -> dict[str, str]:
    """The blend's test coverage of its 90% intervals, Gaussian NLL and std-error Spearman.

    Empty where the run logged none (no ``metrics.csv``, no GP blend, an older commit).
    """
    metrics = run_dir / "metrics.csv"
    if not metrics.is_file():
        return {}
    return {name: f"{logged(metrics, f'test/{name}_blend')[-1]:.6g}" for name in UNCERTAINTY
            if has_logged(metrics, f"test/{name}_blend")}


def git_commit(folder: Path) -> str:
    """Short commit of ``folder``'s checkout, ``-dirty`` when it has uncommitted changes."""
    try:
        def git(*words: str) -> str:
            return subprocess.run(["git", *words], cwd=folder, capture_output=True, text=True,
                                  check=True).stdout.strip()
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                    ":(exclude)results")  # results being written are not the code run
        return git("rev-parse", "--short", "HEAD") + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return ""


def _mean_std(values: list[float]) -> str:
    if not values:
        return "-"
    std = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return f"{np.mean(values):.3f} ± {std:.3f}"


def _vs(mae: list[float], base: list[float]) -> str:
    return f"{100 * (np.mean(mae) / np.mean(base) - 1):+.1f}%" if base else ""


def summary(rows: list[dict[str, str]], sets: list[str], methods: list[str]) -> str:
    """Markdown table: per set and method, mean ± std test MAE and RMSE, minutes a run, commits.

    The last two columns compare the mean test MAE with chemprop's defaults and with the better
    (lower mean test MAE) of chemprop's two RDKit 2D variants on the same set.
    """
    lines = ["| set | method | seeds | test MAE | test RMSE | best val MAE | min/run (CPU) "
             "| commit | vs chemprop | vs chemprop+RDKit2D |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    present_sets = [s for s in sets if any(r["set"] == s for r in rows)]
    present_sets += sorted({r["set"] for r in rows} - set(present_sets))
    for name in present_sets:
        def maes(method: str, name: str = name) -> list[float]:
            return [float(r["test_mae"]) for r in rows
                    if r["set"] == name and r["method"] == method]
        found = {r["method"] for r in rows if r["set"] == name}
        for method in [m for m in methods if m in found] + sorted(found - set(methods)):
            mine = [r for r in rows if r["set"] == name and r["method"] == method]
            mae = [float(r["test_mae"]) for r in mine]
            rmse = [float(r["test_rmse"]) for r in mine]
            val = [float(r["val_mae"]) for r in mine if r.get("val_mae")]
            minutes = float(np.mean([float(r["minutes"]) for r in mine]))
            cpu = [float(r["cpu_minutes"]) for r in mine if r.get("cpu_minutes")]
            cpu_text = f" ({np.mean(cpu):.1f})" if cpu else ""
            seeds = ",".join(sorted((r["seed"] for r in mine), key=int))
            commits = ",".join(sorted({r.get("commit", "") for r in mine}))
            rdkit2d = min((maes(m) for m in ("chemprop_rdkit2d", "chemprop_rdkit2d_norm")
                           if maes(m)), key=np.mean, default=[])
            vs = [_vs(mae, maes("chemprop")) if method != "chemprop" else "",
                  _vs(mae, rdkit2d) if not method.startswith("chemprop") else ""]
            lines.append(f"| {name} | {method} | {seeds} | {_mean_std(mae)} | "
                         f"{_mean_std(rmse)} | {_mean_std(val)} | {minutes:.1f}{cpu_text} | "
                         f"{commits} | {vs[0]} | {vs[1]} |")
    return "\n".join(lines)


def parse_variants(items: list[str]) -> dict[str, str]:
    """``ours`` (the plain command) and each ``NAME=EXTRA ARGS`` of ``--variant``."""
    variants = {"ours": ""}
    for item in items:
        name, sep, extra = item.partition("=")
        if not sep or not name or name in FIXED:
            raise SystemExit(f"--variant wants NAME='EXTRA ARGS' (not one of {FIXED}), got "
                             f"{item!r}")
        variants[name] = extra
    return variants


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--sets", nargs="+", default=SETS, help=f"default: {' '.join(SETS)}")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=None,
                        help=f"{', '.join(FIXED)}, ours and --variant names (default: all)")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                        help="a variant of ours: extra arguments for its fit command")
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data" / "public")
    parser.add_argument("--results", type=Path, default=ROOT / "results" / "small_data.csv")
    parser.add_argument("--runs-dir", type=Path, default=ROOT / "runs" / "small_data")
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "smiles_csv.yaml")
    parser.add_argument("--chemprop", type=Path, default=ROOT / ".venv-chemprop/bin/chemprop")
    parser.add_argument("--graphormer", default=f"{sys.executable} -m graphormer_sepnorm.cli",
                        help="the command that runs graphormer-sepnorm (default: this Python)")
    parser.add_argument("--workdir", type=Path, default=ROOT,
                        help="folder ours runs in: with the default --graphormer (python -m), "
                             "the graphormer_sepnorm package found there is the one run (e.g. a "
                             "git worktree of a fixed commit)")
    parser.add_argument("--rerun", action="store_true", help="rerun runs already in --results")
    parser.add_argument("--report-only", action="store_true", help="only print the table")
    args = parser.parse_args(argv)

    variants = parse_variants(args.variant)
    upgrade_results(args.results)
    methods = args.methods or [*FIXED, *variants]
    unknown = [m for m in methods if m not in FIXED and m not in variants]
    if unknown:
        raise SystemExit(f"unknown method(s) {unknown}: define them with --variant NAME=ARGS")
    args.data_dir, args.results, args.runs_dir, args.config = (
        p.resolve() for p in (args.data_dir, args.results, args.runs_dir, args.config))
    if not args.report_only:
        for name in args.sets:
            data = args.data_dir / f"{name}.csv"
            if not data.is_file():
                raise SystemExit(f"{data} not found: make it with benchmarks/public_sets.py or "
                                 "benchmarks/small_sets.py")
            _, _, split = read_set(data)
            counts = {k: split.count(k) for k in ("train", "val", "test")}
            for seed in args.seeds:
                for method in methods:
                    done = {(r["set"], r["method"], r["seed"]) for r in read_rows(args.results)}
                    if (name, method, str(seed)) in done and not args.rerun:
                        continue
                    run_dir = args.runs_dir / name / method / f"seed{seed}"
                    if run_dir.exists():
                        shutil.rmtree(run_dir)
                    print(f"{name} {method} seed {seed} ...", flush=True)
                    val = math.nan  # chemprop's validation error is not read
                    if method in chemprop_side.METHODS:
                        test = [(s, t) for s, t, k in zip(*read_set(data), strict=True)
                                if k == "test"]
                        mae, rmse, (seconds, cpu), command = chemprop_side.run_chemprop(
                            args.chemprop, method, data, seed, run_dir, run_logged, test)
                    elif method == "gp":
                        mae, rmse, (seconds, cpu), command = run_gp(data, run_dir)
                    else:
                        mae, rmse, (seconds, cpu), command, val = run_ours(
                            args, data, seed, run_dir, variants[method])
                    print(f"  test MAE {mae:.4f}, RMSE {rmse:.4f}, {seconds / 60:.1f} min "
                          f"({cpu / 60:.1f} CPU min)", flush=True)
                    append_row(args.results, {
                        "set": name, "method": method, "seed": seed,
                        "test_mae": f"{mae:.6g}", "test_rmse": f"{rmse:.6g}",
                        "val_mae": "" if math.isnan(val) else f"{val:.6g}",
                        "minutes": f"{seconds / 60:.2f}",
                        "cpu_minutes": f"{cpu / 60:.2f}", "n_train": counts["train"],
                        "n_val": counts["val"], "n_test": counts["test"],
                        "command": shlex.join(command), "run_dir": str(run_dir),
                        "commit": ("chemprop" if method in chemprop_side.METHODS
                                   else git_commit(args.workdir)),
                        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                        **uncertainty(run_dir)}, FIELDS)
    rows = [r for r in read_rows(args.results) if math.isfinite(float(r["test_mae"]))]
    table = summary(rows, args.sets, methods)
    print(table)
    md = args.results.with_suffix(".md")
    md.parent.mkdir(parents=True, exist_ok=True)
    notes = args.results.with_name(args.results.stem + "_notes.md")
    md.write_text("# Small-data benchmark (test MAE and RMSE, mean ± std over seeds; one thread "
                  "a run)\n\n" + table + "\n"
                  + ("\n" + notes.read_text() if notes.is_file() else ""))


if __name__ == "__main__":
    main()
