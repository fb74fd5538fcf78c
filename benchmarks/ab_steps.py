r"""A/B of training and inference steps: the working tree against a git revision, in one process.

This machine's speed drifts in phases (the same matmul measured 40 to 83 GFLOP/s minutes apart),
so two runs of ``compare_hf.py`` cannot resolve a change of a few percent. Here both versions
run in one process on the same batches, alternating batch by batch (A then B, then B then A), and
each side's step times are summed: drift then hits both alike. The revision's package is
exported with ``git archive`` and imported under another name.

Example (from the repository root)::

    .venv/bin/python benchmarks/ab_steps.py --base HEAD~1 \\
        --smiles ../shared/data/ogbg_molhiv/mapping/mol.csv.gz --limit 1024 --batch-size 64
"""

from __future__ import annotations

import argparse
import importlib
import io
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from _common import featurize
from _ours_side import infer_step, to_data, train_step

import graphormer_sepnorm

PACKAGE = "graphormer_sepnorm"
BASE_NAME = "graphormer_sepnorm_base"


def export_revision(revision: str, folder: Path) -> ModuleType:
    """The package as of ``revision``, importable as :data:`BASE_NAME`."""
    repo = Path(__file__).resolve().parents[1]
    archive = subprocess.run(["git", "archive", revision, PACKAGE], cwd=repo, check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12 / 3.11.4
            tar.extractall(folder, filter="data")
        else:
            tar.extractall(folder)  # noqa: S202 (our own repository's archive)
    (folder / PACKAGE).rename(folder / BASE_NAME)
    for path in (folder / BASE_NAME).rglob("*.py"):
        path.write_text(re.sub(rf"\b{PACKAGE}\b", BASE_NAME, path.read_text()))
    sys.path.insert(0, str(folder))
    return importlib.import_module(BASE_NAME)


def build_side(package: ModuleType, workload: dict[str, Any], batches: list[list[int]]
               ) -> tuple[torch.nn.Module, torch.optim.Optimizer, list[Any]]:
    """Model (seed 0), fused AdamW and the collated batches of one side."""
    torch.manual_seed(0)
    sizes = (workload["atom_dims"], workload["bond_dims"])
    config = getattr(package, "GraphormerConfig", None)  # None: a revision before it existed
    model = (package.Graphormer(*sizes, num_tasks=1) if config is None
             else package.Graphormer(config(*sizes, num_tasks=1)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.01, fused=True)
    collate = package.GraphormerCollator(multi_hop_max_dist=20)
    return model, optimizer, [collate([workload["data"][i] for i in b]) for b in batches]


def compare(sides: dict[str, Any], step: Any, rounds: int) -> dict[str, float]:
    """Seconds per side over ``rounds`` passes, alternating the order batch by batch."""
    for model, optimizer, batches in sides.values():
        step(model, optimizer, batches[0])  # warm-up
    seconds = dict.fromkeys(sides, 0.0)
    count = len(next(iter(sides.values()))[2])
    for turn in range(rounds):
        for index in range(count):
            order = list(sides) if (index + turn) % 2 == 0 else list(sides)[::-1]
            for name in order:
                model, optimizer, batches = sides[name]
                start = time.perf_counter()
                step(model, optimizer, batches[index])
                seconds[name] += time.perf_counter() - start
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="git revision to compare against (A)")
    parser.add_argument("--smiles", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2, help="passes over the batches")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims

    graphs, _ = featurize(args.smiles, args.limit)
    data = [to_data(g) for g in graphs]
    graphormer_sepnorm.add_shortest_paths(data)
    workload = {"data": data, "atom_dims": get_atom_feature_dims(),
                "bond_dims": get_bond_feature_dims()}
    sampler = graphormer_sepnorm.data.SizeGroupedBatchSampler(
        [d.num_nodes for d in data], args.batch_size, shuffle=True, seed=0)
    batches = list(sampler)
    with tempfile.TemporaryDirectory(prefix="ab_steps_") as tmp:
        base = export_revision(args.base, Path(tmp))
        sides = {"A": build_side(base, workload, batches),
                 "B": build_side(graphormer_sepnorm, workload, batches)}
        steps = (("train", train_step),
                 ("infer", lambda model, _optimizer, batch: infer_step(model, batch)))
        for name, step in steps:
            seconds = compare(sides, step, args.rounds)
            print(f"{name}: A ({args.base}) {seconds['A']:.2f} s, B (working tree) "
                  f"{seconds['B']:.2f} s, B/A {seconds['B'] / seconds['A']:.3f}", flush=True)


if __name__ == "__main__":
    main()
