r"""Coverage of a cross-validation ensemble's CV+ 90% intervals on molecules no fold saw.

The folds of ``graphormer-sepnorm-experiment --folds K`` predict as one ensemble whose
regression intervals are calibrated by CV+ on the out-of-fold residuals (every molecule of the
table held out once) instead of a few dozen validation molecules. This script takes the fold
checkpoints and a held-out CSV (``smiles`` and the target), runs ``graphormer-sepnorm-predict``
on it as a user does, and appends to ``--results`` (JSONL) the ensemble's test MAE, the
coverage and mean width of its 90% intervals, and the calibration the command reported;
``--each`` does the same for every checkpoint alone (its blend's split-conformal interval,
calibrated on its validation fold).

Example (solubility: the folds on its training file, its own test file held out)::

    graphormer-sepnorm-experiment --name solubility_cv --configs smiles_csv --norms sepnorm \
        --folds 5 --fold-split random --extra --data.path solubility_cv.csv \
        --data.target_columns '[y]'
    .venv/bin/python benchmarks/cv_plus.py --set solubility --test solubility_test.csv \
        --checkpoints runs/experiments/solubility_cv/*-fold*/fit/checkpoints/best-*.ckpt --each
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def interval_scores(y: np.ndarray, mean: np.ndarray, lo: np.ndarray, hi: np.ndarray
                    ) -> dict[str, float]:
    """MAE of ``mean``, the share of ``y`` inside ``[lo, hi]`` and the intervals' mean width."""
    return {"test_mae": float(np.abs(mean - y).mean()),
            "coverage90": float(((y >= lo) & (y <= hi)).mean()),
            "mean_width": float((hi - lo).mean())}


def read_predictions(path: Path, test: Path, target: str) -> tuple[np.ndarray, ...]:
    """``y``, the prediction, ``lo90`` and ``hi90`` of each test row, checked row by row.

    Raises:
        RuntimeError: when the predictions are not the test rows in order, or a row failed.
    """
    with open(test, newline="") as handle:
        truth = list(csv.DictReader(handle))
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    if [r["smiles"] for r in rows] != [r["smiles"] for r in truth] or any(r["error"]
                                                                          for r in rows):
        raise RuntimeError(f"{path}: not every test row predicted, in order")
    # the input's own target column is kept; the prediction is then ``<target>_pred``
    predicted = f"{target}_pred" if f"{target}_pred" in rows[0] else target
    columns = (predicted, f"{target}_lo90", f"{target}_hi90")
    return (np.array([float(r[target]) for r in truth]),
            *(np.array([float(r[c]) for r in rows]) for c in columns))


def predict(name: str, test: Path, target: str, checkpoints: list[Path], results: Path
            ) -> dict:
    """``test`` predicted by ``checkpoints`` as one ensemble: its record, appended to results."""
    out = results.with_suffix(f".{name}.csv")
    command = [str(Path(sys.executable).with_name("graphormer-sepnorm-predict")), str(test),
               "--output", str(out), "--overwrite", "--checkpoint", *map(str, checkpoints)]
    run = subprocess.run(command, capture_output=True, text=True, check=True)
    scores = interval_scores(*read_predictions(out, test, target))
    notes = [line for line in run.stderr.splitlines() if "interval" in line]
    record = {"set": name, "members": len(checkpoints), **scores,
              "calibration": notes[-1] if notes else "", "command": " ".join(command),
              "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    with open(results, "a") as handle:
        handle.write(json.dumps(record) + "\n")
    out.unlink()
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--set", required=True, help="the set's name in the results")
    parser.add_argument("--test", type=Path, required=True, help="held-out CSV: smiles, y")
    parser.add_argument("--target", default="y")
    parser.add_argument("--checkpoints", type=Path, nargs="+", required=True)
    parser.add_argument("--each", action="store_true",
                        help="also each checkpoint alone (its own split-conformal interval)")
    parser.add_argument("--results", type=Path, default=ROOT / "results" / "cv_plus.jsonl")
    args = parser.parse_args(argv)
    for checkpoint in args.checkpoints if args.each else []:
        print(json.dumps(predict(args.set, args.test, args.target, [checkpoint], args.results)))
    print(json.dumps(predict(args.set, args.test, args.target, args.checkpoints, args.results)))


if __name__ == "__main__":
    main()
