"""Prediction throughput of chemprop 2.3.1, as ``predict_throughput.py`` measures ours.

Trains one chemprop model per method on a benchmark set (``_chemprop_side.METHODS``: its
defaults, ``--molecule-featurizers rdkit_2d``), then times the whole ``chemprop predict``
command on the first ``--limit`` SMILES of ZINC's JT-VAE list: wall time, CPU time of the
command and its children (user + system, ``os.wait4``), their peak RSS, and the rows that came
back. One JSON line per method on stdout, also appended to ``--results``.

    .venv/bin/python benchmarks/chemprop_throughput.py --limit 100000 --methods chemprop
    .venv/bin/python benchmarks/chemprop_throughput.py --limit 20000 --methods chemprop_rdkit2d
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
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
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    data = args.work / f"input_{args.limit}.csv"
    rows = write_input(args.smiles, args.limit, data)
    for method in args.methods:
        run = args.work / method
        model = run / "model_0" / "best.pt"
        if not model.exists():  # one thread, as small_data.py trains it
            timed(chemprop_side.chemprop_command(args.chemprop, method, ROOT / "data/public" /
                                                 f"{args.set}.csv", 0, run),
                  args.work / f"{method}_train.log", one_thread_env())
        output = args.work / f"{method}_preds.csv"
        figures = timed(predict_command(args.chemprop, method, model, data, output,
                                        args.workers),
                        args.work / f"{method}_predict.log")
        with open(output, newline="") as handle:
            returned = sum(1 for _ in csv.DictReader(handle))
        result = {"method": method, "set": args.set, "rows": rows, "returned": returned,
                  "workers": args.workers, **{k: round(v, 1) for k, v in figures.items()},
                  "mol_per_s": round(rows / figures["seconds"], 1),
                  "cpu_ms_per_mol": round(1000 * figures["cpu_s"] / rows, 2),
                  "date": time.strftime("%Y-%m-%dT%H:%M%z")}
        print(json.dumps(result), flush=True)
        with open(args.results, "a") as handle:
            handle.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
