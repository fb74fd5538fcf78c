"""Prediction throughput of chemprop 2.3.1, as ``predict_throughput.py`` measures ours.

Trains one chemprop model per method on a benchmark set (``_chemprop_side.METHODS``: its
defaults, ``--molecule-featurizers rdkit_2d``), then times the whole ``chemprop predict``
command on the first ``--limit`` SMILES of ZINC's JT-VAE list: wall time, CPU time of the
command and its children (user + system, ``os.wait4``), their peak RSS, and the rows that came
back. One JSON line per method on stdout, also appended to ``--results``.

``--ours NAME=CHECKPOINT`` (repeatable) times ``graphormer-sepnorm-predict`` the same way, as a
user runs it (the command with its defaults, ``--no-progress``), interleaved with chemprop in
``--rounds`` rounds: each round runs every chemprop method and every ``--ours`` entry in turn,
so a machine whose speed drifts slows them alike. ``--ours-pythonpath NAME=DIR`` runs that
entry with ``DIR`` first on ``PYTHONPATH`` (another checkout of the package, e.g. the commit
before a change).

    .venv/bin/python benchmarks/chemprop_throughput.py --limit 100000 --methods chemprop
    .venv/bin/python benchmarks/chemprop_throughput.py --limit 20000 --methods chemprop_rdkit2d
    .venv/bin/python benchmarks/chemprop_throughput.py --limit 10000 --rounds 2 \
        --methods chemprop_rdkit2d --ours now=runs/sol/best.ckpt
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _chemprop_side as chemprop_side  # noqa: E402
from small_data import one_thread_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SMILES = ROOT.parent / "shared/data/ZINC/reference/jtvae_smiles/train.txt"


def write_input(source: Path, limit: int, target: Path) -> int:
    """The first ``limit`` SMILES of a one-per-line file as a ``smiles`` CSV; the count."""
    with open(source) as lines, open(target, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["smiles"])
        rows = [[line.strip()] for line in itertools.islice(lines, limit)]
        writer.writerows(rows)
    return len(rows)


def predict_command(executable: Path, method: str, model: Path, data: Path, output: Path,
                    workers: int) -> list[str]:
    """``chemprop predict`` of ``data`` with one model, ``workers`` DataLoader processes.

    A chemprop checkpoint does not record its molecule featurizer: prediction is told again.
    """
    extra = chemprop_side.METHODS[method]
    featurizers = extra[extra.index("--molecule-featurizers"):][:2] \
        if "--molecule-featurizers" in extra else []
    return [str(executable), "predict", "--test-path", str(data), "--smiles-columns", "smiles",
            "--model-paths", str(model), "--num-workers", str(workers),
            "--preds-path", str(output), *featurizers]


def timed(command: list[str], log: Path, env: dict[str, str] | None = None) -> dict[str, float]:
    """Runs ``command``; its wall and CPU seconds and peak RSS (MiB), children included."""
    with open(log, "w") as handle:
        return chemprop_side.run_child(command, handle, env)


def ours_command(checkpoint: str, data: Path, output: Path) -> list[str]:
    """``graphormer-sepnorm-predict`` of ``data`` with its defaults (no progress bar)."""
    return [str(Path(sys.executable).with_name("graphormer-sepnorm-predict")), str(data), "-o",
            str(output), "--checkpoint", checkpoint, "--overwrite", "--no-progress"]


def pairs(items: list[str]) -> dict[str, str]:
    """``NAME=VALUE`` items as a dict."""
    return dict(item.split("=", 1) for item in items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chemprop", type=Path, default=ROOT / ".venv-chemprop/bin/chemprop")
    parser.add_argument("--methods", nargs="+", default=["chemprop", "chemprop_rdkit2d"],
                        choices=sorted(chemprop_side.METHODS))
    parser.add_argument("--set", default="solubility", help="data/public/<set>.csv to train on")
    parser.add_argument("--smiles", type=Path, default=DEFAULT_SMILES)
    parser.add_argument("--limit", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=0, help="chemprop predict's --num-workers")
    parser.add_argument("--work", type=Path, default=ROOT / "runs/chemprop_throughput")
    parser.add_argument("--results", type=Path, default=ROOT / "results/chemprop_throughput.jsonl")
    parser.add_argument("--ours", action="append", default=[], metavar="NAME=CHECKPOINT")
    parser.add_argument("--ours-pythonpath", action="append", default=[], metavar="NAME=DIR")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    data = args.work / f"input_{args.limit}.csv"
    rows = write_input(args.smiles, args.limit, data)
    for round_ in range(1, args.rounds + 1):
        for method in args.methods:
            run = args.work / method
            model = run / "model_0" / "best.pt"
            if not model.exists():  # one thread, as small_data.py trains it
                timed(chemprop_side.chemprop_command(args.chemprop, method, ROOT / "data/public"
                                                     / f"{args.set}.csv", 0, run),
                      args.work / f"{method}_train.log", one_thread_env())
            output = args.work / f"{method}_preds.csv"
            figures = timed(predict_command(args.chemprop, method, model, data, output,
                                            args.workers),
                            args.work / f"{method}_predict.log")
            report(args, {"method": method, "set": args.set, "workers": args.workers},
                   figures, rows, output, round_)
        for name, checkpoint in pairs(args.ours).items():
            env = dict(os.environ)
            if name in pairs(args.ours_pythonpath):
                env["PYTHONPATH"] = pairs(args.ours_pythonpath)[name]
            output = args.work / f"ours_{name}_preds.csv"
            figures = timed(ours_command(checkpoint, data, output),
                            args.work / f"ours_{name}_predict.log", env)
            report(args, {"method": f"graphormer-sepnorm {name}", "checkpoint": checkpoint},
                   figures, rows, output, round_)


def report(args: argparse.Namespace, what: dict, figures: dict[str, float], rows: int,
           output: Path, round_: int) -> None:
    """One JSON line of a timed command, on stdout and appended to ``--results``."""
    with open(output, newline="") as handle:
        returned = sum(1 for _ in csv.DictReader(handle))
    result = {**what, "rows": rows, "returned": returned, "round": round_,
              **{k: round(v, 1) for k, v in figures.items()},
              "mol_per_s": round(rows / figures["seconds"], 1),
              "cpu_ms_per_mol": round(1000 * figures["cpu_s"] / rows, 2),
              "load": round(os.getloadavg()[0], 1),
              "date": time.strftime("%Y-%m-%dT%H:%M%z")}
    print(json.dumps(result), flush=True)
    with open(args.results, "a") as handle:
        handle.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
