r"""Assay tables: ours against chemprop 2.3.1 on sparse multi-task binary and multiclass sets.

The classification counterpart of ``benchmarks/small_data.py`` (whose runner, result file
handling and commit stamp it reuses). For each set (``<data-dir>/<set>.csv``, made by
``benchmarks/assay_sets.py``: ``smiles``, the label columns, ``split``), each seed and each
method, one training run on one thread, then its test metrics and wall and CPU time:

- ``ours``: ``graphormer-sepnorm fit --config smiles_csv --data.path X --data.target_columns
  '[...]' --data.task binary|multiclass --data.split column --seed_everything S``, the recipe's
  defaults and nothing else; the test metrics of the best-on-validation checkpoint from the
  run's ``metrics.csv``.
- ``chemprop`` and ``chemprop_rdkit2d`` (``benchmarks/_chemprop_side.py``): ``chemprop train
  --task-type classification`` (or ``multiclass --multiclass-num-classes K``) on the same
  ``split`` column, ``--pytorch-seed S``, all else chemprop's default; the second with
  ``--molecule-featurizers rdkit_2d``; ``chemprop_rdkit2d_norm`` with chemprop v1's
  CDF-normalized descriptors instead (``rdkit_2d`` stops on Tox21: a training molecule's
  descriptor is infinite and its scaler refuses it). chemprop leaves empty cells out of its
  loss, as ours.
  Its test metrics are computed here from its ``test_predictions.csv`` with the package's own
  ``TaskMetrics`` (the code that scores ours), so both sides are scored alike.

Metrics (test split, each label on its labelled molecules): binary sets, ROC-AUC per label and
their mean, PR-AUC (average precision) mean; multiclass, one-vs-rest ROC-AUC (macro over
classes), accuracy and macro F1. Every run is one row of ``--results`` (CSV, appended as runs
end; a (set, method, seed) already there is skipped); ``--report-only`` prints the tables of
mean ± std over seeds.

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/assay_tables.py --sets tox21 hiv3
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shlex
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from graphormer_sepnorm.experiment import append_row, read_rows
from graphormer_sepnorm.training.metrics import TaskMetrics, metric_suffix

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _chemprop_side as chemprop_side  # noqa: E402
from small_data import _mean_std, git_commit, has_logged, logged, run_logged  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TASKS = {"tox21": "binary", "hiv3": "multiclass"}
METHODS = ["chemprop", "chemprop_rdkit2d", "chemprop_rdkit2d_norm", "ours"]
METRICS = ["roc_auc", "pr_auc", "accuracy", "f1"]
FIELDS = ["set", "task", "method", "seed", *(f"test_{m}" for m in METRICS), "val_roc_auc",
          "test_roc_auc_per_label", "minutes", "cpu_minutes", "n_train", "n_val", "n_test",
          "command", "run_dir", "commit", "finished"]


Table = tuple[list[str], list[str], np.ndarray, list[str]]


def read_table(path: Path) -> Table:
    """Label columns, SMILES, labels ``[N, T]`` (NaN where empty) and split of a set's CSV."""
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    labels = [c for c in rows[0] if c not in ("smiles", "split")]
    y = np.array([[float(r[c]) if r[c] != "" else math.nan for c in labels] for r in rows])
    return labels, [r["smiles"] for r in rows], y, [r["split"] for r in rows]


def score(task: str, labels: list[str], out: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """The package's test metrics of outputs ``out`` (logits) against ``y`` ``[N, T]``."""
    classes = out.shape[1] // len(labels) if task == "multiclass" else None
    metrics = TaskMetrics(task, labels, classes)
    metrics.update(out, y)
    return {k: float(v) for k, v in metrics.compute().items()}


def chemprop_outputs(run_dir: Path, labels: list[str], smiles: list[str], task: str
                     ) -> torch.Tensor:
    """The test predictions of chemprop as logits ``[N, T]`` or ``[N, T * K]`` (log probabilities).

    Raises:
        RuntimeError: when the predictions are not the set's test rows in file order.
    """
    with open(run_dir / "model_0" / "test_predictions.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    if [r["smiles"] for r in rows] != smiles:
        raise RuntimeError(f"{run_dir}: test predictions are not the test rows in file order")
    if task == "binary":
        p = torch.tensor([[float(r[c]) for c in labels] for r in rows], dtype=torch.float64)
        return torch.logit(p.clamp(1e-12, 1 - 1e-12))
    # multiclass: column ``<label>_prob`` holds the K probabilities, comma-separated
    p = torch.tensor([[float(v) for c in labels for v in r[f"{c}_prob"].split(",")]
                      for r in rows], dtype=torch.float64)
    return p.clamp(min=1e-12).log()


def run_chemprop(args: argparse.Namespace, name: str, method: str, seed: int, run_dir: Path,
                 table: Table) -> tuple[dict[str, float], tuple[float, float], list[str]]:
    """One chemprop run on the set's ``table``: its test metrics, (wall, CPU) seconds, command."""
    data = args.data_dir / f"{name}.csv"
    labels, smiles, y, split = table
    test = [i for i, k in enumerate(split) if k == "test"]
    task_args = (["--task-type", "classification"] if TASKS[name] == "binary" else
                 ["--task-type", "multiclass", "--multiclass-num-classes",
                  str(int(np.nanmax(y)) + 1)])
    command = chemprop_side.chemprop_command(args.chemprop, method, data, seed, run_dir,
                                             task_args=task_args, targets=labels)
    times = run_logged(command, run_dir / "run.log")
    out = chemprop_outputs(run_dir, labels, [smiles[i] for i in test], TASKS[name])
    return score(TASKS[name], labels, out, torch.tensor(y[test])), times, command


def run_ours(args: argparse.Namespace, name: str, seed: int, run_dir: Path, labels: list[str]
             ) -> tuple[dict[str, float], tuple[float, float], list[str]]:
    """One fit of ours: its test metrics (and ``val_roc_auc``, the best), times and command."""
    data = args.data_dir / f"{name}.csv"
    command = [*shlex.split(args.graphormer), "fit", "--config", "smiles_csv",
               "--data.path", str(data), "--data.target_columns", json.dumps(labels),
               "--data.task", TASKS[name], "--data.split", "column",
               "--seed_everything", str(seed),
               "--trainer.logger.init_args.save_dir", str(run_dir.parent),
               "--trainer.logger.init_args.name", "",
               "--trainer.logger.init_args.version", run_dir.name]
    times = run_logged(command, run_dir.parent / f"{run_dir.name}.log", args.workdir)
    metrics_csv = run_dir / "metrics.csv"
    names = [*METRICS, *(f"roc_auc_{metric_suffix(c)}" for c in labels if len(labels) > 1)]
    found = {m: logged(metrics_csv, f"test/{m}")[-1] for m in names
             if has_logged(metrics_csv, f"test/{m}")}
    found["val_roc_auc"] = max(logged(metrics_csv, "val/roc_auc"))
    return found, times, command


def as_row(name: str, method: str, seed: int, metrics: dict[str, float],
           times: tuple[float, float], command: list[str], run_dir: Path, split: list[str],
           labels: list[str], commit: str) -> dict[str, str]:
    """One row of the results CSV."""
    per_label = {c: metrics.get(f"roc_auc_{metric_suffix(c)}") for c in labels}
    return {"set": name, "task": TASKS[name], "method": method, "seed": seed,
            **{f"test_{m}": f"{metrics[m]:.6g}" for m in METRICS if m in metrics},
            "val_roc_auc": f"{metrics['val_roc_auc']:.6g}" if "val_roc_auc" in metrics else "",
            "test_roc_auc_per_label": json.dumps(per_label) if len(labels) > 1 else "",
            "minutes": f"{times[0] / 60:.2f}", "cpu_minutes": f"{times[1] / 60:.2f}",
            **{f"n_{k}": split.count(k) for k in ("train", "val", "test")},
            "command": shlex.join(command), "run_dir": str(run_dir), "commit": commit,
            "finished": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def summary(rows: list[dict[str, str]]) -> str:
    """Markdown tables: per set and method, mean ± std of each metric; per label ROC-AUC."""
    lines = []
    for name in dict.fromkeys(r["set"] for r in rows):
        mine = [r for r in rows if r["set"] == name]
        shown = [m for m in METRICS if any(r[f"test_{m}"] for r in mine)]
        lines += [f"\n{name}:\n", "| method | seeds | " + " | ".join(f"test {m}" for m in shown)
                  + " | min/run (CPU) |", "| --- " * (len(shown) + 3) + "|"]
        methods = [m for m in METHODS if any(r["method"] == m for r in mine)]
        for method in methods:
            runs = [r for r in mine if r["method"] == method]
            cells = [_mean_std([float(r[f"test_{m}"]) for r in runs]) for m in shown]
            seeds = ",".join(sorted((r["seed"] for r in runs), key=int))
            minutes = np.mean([float(r["minutes"]) for r in runs])
            cpu = np.mean([float(r["cpu_minutes"]) for r in runs])
            lines.append(f"| {method} | {seeds} | " + " | ".join(cells)
                         + f" | {minutes:.1f} ({cpu:.1f}) |")
        per = [r for r in mine if r["test_roc_auc_per_label"]]
        if per:
            labels = list(json.loads(per[0]["test_roc_auc_per_label"]))
            lines += ["", "| label | " + " | ".join(methods) + " |",
                      "| --- " * (len(methods) + 1) + "|"]
            for label in labels:
                cells = [_mean_std([json.loads(r["test_roc_auc_per_label"])[label]
                                    for r in per if r["method"] == m]) for m in methods]
                lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_one(args: argparse.Namespace, name: str, method: str, seed: int, table: Table) -> None:
    """One run of ``method`` on set ``name``, its row appended to ``--results``.

    Skipped when the results already hold the (set, method, seed): they are read again before
    each run, so several of these processes can share one results file.
    """
    if (name, method, str(seed)) in {(r["set"], r["method"], r["seed"])
                                     for r in read_rows(args.results)}:
        return
    run_dir = args.runs_dir / name / method / f"seed{seed}"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    print(f"{name} {method} seed {seed} ...", flush=True)
    labels, _, _, split = table
    if method == "ours":
        commit = git_commit(args.workdir)  # the code that runs, before it runs
        metrics, times, command = run_ours(args, name, seed, run_dir, labels)
    else:
        metrics, times, command = run_chemprop(args, name, method, seed, run_dir, table)
        commit = "chemprop"
    print(f"  test ROC-AUC {metrics['roc_auc']:.4f}, {times[0] / 60:.1f} min "
          f"({times[1] / 60:.1f} CPU min)", flush=True)
    append_row(args.results, as_row(name, method, seed, metrics, times, command, run_dir,
                                    split, labels, commit), FIELDS)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--sets", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data" / "assay")
    parser.add_argument("--results", type=Path, default=ROOT / "results" / "assay_tables.csv")
    parser.add_argument("--runs-dir", type=Path, default=ROOT / "runs" / "assay_tables")
    parser.add_argument("--chemprop", type=Path, default=ROOT / ".venv-chemprop/bin/chemprop")
    parser.add_argument("--graphormer", default=f"{sys.executable} -m graphormer_sepnorm.cli")
    parser.add_argument("--workdir", type=Path, default=ROOT)
    parser.add_argument("--report-only", action="store_true", help="only print the tables")
    args = parser.parse_args(argv)
    args.data_dir, args.results, args.runs_dir = (
        p.resolve() for p in (args.data_dir, args.results, args.runs_dir))
    seeds = [] if args.report_only else args.seeds
    tables = {name: read_table(args.data_dir / f"{name}.csv") for name in args.sets if seeds}
    for seed in seeds:
        for name in args.sets:
            for method in args.methods:
                run_one(args, name, method, seed, tables[name])
    print(summary(read_rows(args.results)))


if __name__ == "__main__":
    main()
