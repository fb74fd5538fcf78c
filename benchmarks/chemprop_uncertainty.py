r"""chemprop's own uncertainty on the small sets, calibrated and scored as ours is.

A reference for the deviations of the small-data default (issue 30): is a weak rank
correlation between predicted deviations and errors on a set ours, or the set's? For each set
(``<data-dir>/<set>.csv``: ``smiles``, ``y``, ``split``), seed and method, ``chemprop train``
(2.3.1, its defaults, the set's split, one thread), then ``chemprop predict`` on the validation
and test molecules with the method's ``--uncertainty-method``:

- ``chemprop_mve``: ``--task-type regression-mve``, a mean-variance head trained on the
  Gaussian NLL; its deviation is the predicted variance's root.
- ``chemprop_ensemble``: ``--ensemble-size 5``, five networks; chemprop seeds them
  ``--pytorch-seed`` to ``--pytorch-seed + 4``, so seed ``S`` here runs ``--pytorch-seed 5 S``
  and the seeds' ensembles share no network. The mean of their predictions and their
  variance's root.

chemprop's variances are then calibrated as the default's deviations are
(:mod:`graphormer_sepnorm.ensemble.calibration`): a split-conformal scale on the validation
molecules' normalized errors, so that ``mean ± 1.645 std`` covers 90% of them; test coverage of
that interval, Gaussian NLL with the scaled deviations, the Spearman correlation of deviation
and absolute error, and the test MAE. The same calibration for both, so only the source of the
deviations differs. Rows go to ``--results`` as runs end (a (set, method, seed) already there is
skipped); the table of mean ± std over seeds goes to the ``.md`` beside it.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/chemprop_uncertainty.py --jobs 2
"""

from __future__ import annotations

import argparse
import csv
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

import numpy as np
import torch

from graphormer_sepnorm.ensemble.calibration import (
    Z90,
    conformal_scale,
    coverage,
    gaussian_nll,
    spearman,
)
from graphormer_sepnorm.experiment import append_row, read_rows

sys.path.insert(0, str(Path(__file__).parent))
import _chemprop_side as chemprop_side  # noqa: E402
from small_data import one_thread_env, read_set  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SETS = ["solubility", "freesolv", "ace_chembl1862_ki", "ace_chembl219_ki", "rdkit_chembl2321810"]
ENSEMBLE = 5
#: extra ``chemprop train`` arguments and the ``--uncertainty-method`` of each method
METHODS = {"chemprop_mve": (["--task-type", "regression-mve"], "mve"),
           "chemprop_ensemble": (["--ensemble-size", str(ENSEMBLE)], "ensemble")}
FIELDS = ["set", "method", "seed", "test_mae", "coverage90", "nll", "std_error_spearman",
          "val_spearman", "scale", "cpu_min"]


def split_files(data: Path, work: Path) -> dict[str, list[tuple[str, float]]]:
    """The set's validation and test rows, each also written as ``<split>.csv`` in ``work``."""
    smiles, targets, labels = read_set(data)
    splits = {}
    for split in ("val", "test"):
        splits[split] = [(s, y) for s, y, label in zip(smiles, targets, labels, strict=True)
                         if label == split]
        with open(work / f"{split}.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["smiles", "y"])
            writer.writerows(splits[split])
    return splits


def predicted(path: Path, rows: list[tuple[str, float]]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and deviation of ``chemprop predict``'s output, checked to be ``rows`` in order."""
    with open(path, newline="") as handle:
        out = list(csv.DictReader(handle))
    if [r["smiles"] for r in out] != [s for s, _ in rows]:
        raise RuntimeError(f"{path}: predictions are not the split's rows in file order")
    return (np.array([float(r["y"]) for r in out]),
            np.sqrt(np.array([float(r["y_unc"]) for r in out]).clip(min=0)))


def scores(val: tuple[np.ndarray, ...], test: tuple[np.ndarray, ...]) -> dict[str, float]:
    """Calibrated on ``val`` ``(mean, std, y)``, scored on ``test``: :data:`FIELDS`' metrics."""
    vmean, vstd, vy = (torch.from_numpy(a) for a in val)
    mean, std, y = (torch.from_numpy(a) for a in test)
    scale = float(conformal_scale((vy - vmean).abs() / vstd.clamp_min(1e-12)))
    calibrated = std * scale / Z90
    return {"test_mae": float((y - mean).abs().mean()),
            "coverage90": float(coverage(mean, calibrated, y)),
            "nll": float(gaussian_nll(mean, calibrated, y)),
            "std_error_spearman": float(spearman(std, (y - mean).abs())),
            "val_spearman": float(spearman(vstd, (vy - vmean).abs())), "scale": scale}


def run(args: argparse.Namespace, name: str, method: str, seed: int) -> dict[str, object]:
    """Trains and predicts one (set, method, seed); returns its row."""
    work = args.work / name / method / str(seed)
    shutil.rmtree(work / "run", ignore_errors=True)  # an interrupted run's models would be read
    work.mkdir(parents=True, exist_ok=True)
    splits = split_files(args.data_dir / f"{name}.csv", work)
    extra, uncertainty = METHODS[method]
    first = seed * ENSEMBLE if method == "chemprop_ensemble" else seed
    train = [*chemprop_side.chemprop_command(args.chemprop, "chemprop", args.data_dir /
                                             f"{name}.csv", first, work / "run"), *extra]
    with open(work / "run.log", "w") as log:
        cpu = cpu_seconds(train, log)
        models = sorted(str(p) for p in (work / "run").glob("model_*/best.pt"))
        out = {}
        for split in ("val", "test"):
            cpu += cpu_seconds([str(args.chemprop), "predict", "--test-path",
                                str(work / f"{split}.csv"), "--model-paths", *models,
                                "--uncertainty-method", uncertainty, "--num-workers", "0",
                                "--preds-path", str(work / f"{split}_preds.csv")], log)
            rows = splits[split]
            out[split] = (*predicted(work / f"{split}_preds.csv", rows),
                          np.array([y for _, y in rows]))
    return {"set": name, "method": method, "seed": seed, **scores(out["val"], out["test"]),
            "cpu_min": round(cpu / 60, 2)}


def cpu_seconds(command: list[str], log: IO[str]) -> float:
    """Runs ``command`` on one thread, output to ``log``; its CPU seconds (user + system).

    Every BLAS is pinned to one thread, as ``small_data.py``'s runs are.
    """
    return chemprop_side.run_child(command, log, one_thread_env())["cpu_s"]


def table(rows: list[dict[str, str]]) -> str:
    """Mean ± std over seeds per (set, method), as markdown."""
    lines = ["| set | method | seeds | test MAE | 90% coverage | NLL | Spearman(std, error) "
             "| val Spearman | CPU min |", "| --- " * 9 + "|"]
    order = {name: i for i, name in enumerate(SETS)}
    keys = sorted({(r["set"], r["method"]) for r in rows},
                  key=lambda k: (order.get(k[0], len(SETS)), k[1]))
    for name, method in keys:
        group = [r for r in rows if (r["set"], r["method"]) == (name, method)]
        cells = []
        for field in ("test_mae", "coverage90", "nll", "std_error_spearman", "val_spearman"):
            values = np.array([float(r[field]) for r in group])
            cells.append(f"{values.mean():.3f} ± {values.std():.3f}")
        cpu = np.mean([float(r["cpu_min"]) for r in group])
        seeds = ",".join(sorted(r["seed"] for r in group))
        lines.append(f"| {name} | {method} | {seeds} | " + " | ".join(cells) + f" | {cpu:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", default=SETS)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data" / "public")
    parser.add_argument("--chemprop", type=Path, default=ROOT / ".venv-chemprop/bin/chemprop")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "chemprop_uncertainty")
    parser.add_argument("--results", type=Path,
                        default=ROOT / "results" / "chemprop_uncertainty.csv")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (one thread each)")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    done = {(r["set"], r["method"], r["seed"]) for r in read_rows(args.results)}
    todo = [(s, m, seed) for m in args.methods for seed in args.seeds for s in args.sets
            if (s, m, str(seed)) not in done and not args.report_only]

    def one(task: tuple[str, str, int]) -> None:
        row = run(args, *task)
        append_row(args.results, row, FIELDS)
        print(", ".join(f"{k} {v}" for k, v in row.items()), flush=True)

    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        list(pool.map(one, todo))
    report = table(read_rows(args.results))
    args.results.with_suffix(".md").write_text(
        "# chemprop's uncertainty, calibrated as ours (`benchmarks/chemprop_uncertainty.py`)\n\n"
        + report)
    print(report)


if __name__ == "__main__":
    main()
