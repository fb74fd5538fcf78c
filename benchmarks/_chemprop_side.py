"""chemprop 2.3.1 runs of ``benchmarks/small_data.py``: its defaults and with RDKit 2D descriptors.

Every method here is ``chemprop train`` on the set's own ``split`` column, one seed
(``--pytorch-seed``), no worker processes, all else chemprop's default (50 epochs, the best
validation epoch's model tested); they differ only in the extra arguments of :data:`METHODS`:

- ``chemprop``: nothing more (the D-MPNN on chemprop's atom and bond features).
- ``chemprop_rdkit2d``: ``--molecule-featurizers rdkit_2d``, what a chemprop user turns on for
  molecule-level descriptors: every ``rdkit.Chem.Descriptors.descList`` entry (217 with the RDKit
  of chemprop's venv) concatenated to the learned molecule vector before the FFN, standardized
  with the training split's mean and std (chemprop's default ``StandardScaler`` descriptor
  scaling; NaN descriptors become 0 before scaling). No other flag is needed for it.
- ``chemprop_rdkit2d_norm``: ``--molecule-featurizers v1_rdkit_2d_normalized
  --no-descriptor-scaling``: chemprop v1's recipe (descriptastorus' 200 descriptors, each mapped
  through a CDF fitted on ChEMBL, so already in [0, 1]). A check on the raw features' scaling,
  whose heavy tails (``Ipc`` reaches 1e24 on ChEMBL molecules) chemprop itself warns about.

The test MAE and RMSE come from the run's ``model_0/test_predictions.csv``, checked to be the
set's test rows in file order.
"""

from __future__ import annotations

import csv
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import numpy as np

METHODS: dict[str, list[str]] = {
    "chemprop": [],
    "chemprop_rdkit2d": ["--molecule-featurizers", "rdkit_2d"],
    "chemprop_rdkit2d_norm": ["--molecule-featurizers", "v1_rdkit_2d_normalized",
                              "--no-descriptor-scaling"],
}


def chemprop_command(executable: Path, method: str, data: Path, seed: int, run_dir: Path,
                     task_args: tuple[str, ...] | list[str] = ("--task-type", "regression"),
                     targets: tuple[str, ...] | list[str] = ("y",)) -> list[str]:
    """The ``chemprop train`` command line of one run of ``method``.

    Args:
        executable: the ``chemprop`` entry point (of its own venv).
        method: a key of :data:`METHODS`.
        data: the set's CSV (``smiles``, the ``targets``, ``split``).
        seed: chemprop's ``--pytorch-seed``.
        run_dir: chemprop's ``--output-dir``.
        task_args: the task's arguments (``benchmarks/assay_tables.py``: classification,
            multiclass).
        targets: the label columns.

    Returns:
        The command, as a list of arguments.
    """
    return [str(executable), "train", "--data-path", str(data), *task_args,
            "--smiles-columns", "smiles", "--target-columns", *targets, "--splits-column",
            "split", "--pytorch-seed", str(seed), "--num-workers", "0", "--output-dir",
            str(run_dir), *METHODS[method]]


def errors_on_test(run_dir: Path, test: list[tuple[str, float]]) -> tuple[float, float]:
    """Test MAE and RMSE of a finished chemprop run.

    Args:
        run_dir: the run's ``--output-dir``.
        test: ``(SMILES, target)`` of the set's test rows, in file order.

    Returns:
        ``(MAE, RMSE)`` in the target's units.

    Raises:
        RuntimeError: when the predictions are not the test rows in file order.
    """
    with open(run_dir / "model_0" / "test_predictions.csv", newline="") as handle:
        predictions = list(csv.DictReader(handle))
    if [p["smiles"] for p in predictions] != [s for s, _ in test]:
        raise RuntimeError(f"{run_dir}: test predictions are not the test rows in file order")
    error = np.array([float(p["y"]) for p in predictions]) - np.array([t for _, t in test])
    return float(np.abs(error).mean()), float(np.sqrt((error ** 2).mean()))


def run_chemprop(executable: Path, method: str, data: Path, seed: int, run_dir: Path,
                 run_logged: Callable[[list[str], Path], tuple[float, float]],
                 test: list[tuple[str, float]]
                 ) -> tuple[float, float, tuple[float, float], list[str]]:
    """Runs one chemprop method on one set and seed.

    Args:
        executable: the ``chemprop`` entry point.
        method: a key of :data:`METHODS`.
        data: the set's CSV.
        seed: chemprop's ``--pytorch-seed``.
        run_dir: the run's output folder (its log is ``run.log`` there).
        run_logged: runs a command with its output to a log, returns (wall, CPU) seconds.
        test: ``(SMILES, target)`` of the set's test rows, in file order.

    Returns:
        Test MAE, RMSE, (wall, CPU) seconds and the command.
    """
    command = chemprop_command(executable, method, data, seed, run_dir)
    times = run_logged(command, run_dir / "run.log")
    return (*errors_on_test(run_dir, test), times, command)


def run_child(command: list[str], log: IO[str], env: dict[str, str] | None = None
              ) -> dict[str, float]:
    """Runs ``command``, output to ``log``; its wall and CPU seconds and peak RSS (MiB).

    CPU (user + system) and memory are the command's and its waited-for children's, from
    ``os.wait4``: per command, where ``RUSAGE_CHILDREN`` of this process would mix commands run
    concurrently.

    Raises:
        subprocess.CalledProcessError: when the command fails.
    """
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status):
        raise subprocess.CalledProcessError(os.waitstatus_to_exitcode(status), command)
    return {"seconds": seconds, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_mib": usage.ru_maxrss / 1024}
