"""Shared pieces of the HF comparison: reading molecules, thread settings, the timed loops.

Both sides of :mod:`compare_hf` run the same loops from here (warm-up, timed training passes,
timed inference pass), so the methodology cannot drift apart; each side only supplies its own
preprocessing, collate function and step functions (:class:`Side`).
"""

from __future__ import annotations

import argparse
import csv
import gc
import gzip
import json
import os
import pickle
import resource
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

Graph = dict[str, Any]
"""A molecule as ``ogb.utils.smiles2graph`` returns it, plus ``y`` (a 1-element list)."""


def read_smiles(path: Path) -> Iterator[tuple[int, str]]:
    """Yields ``(row, smiles)`` from a CSV with a ``smiles`` column or from one SMILES a line.

    ``.gz`` files are decompressed on the fly. ``row`` is 1-based over data rows (header excluded).
    """
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as handle:
        first = handle.readline()
        header = [name.strip().lower() for name in first.rstrip("\r\n").split(",")]
        if "smiles" in header:
            column = header.index("smiles")
            rows = (r[column] for r in csv.reader(handle) if len(r) > column)
        else:  # one SMILES a line; anything after the first whitespace is ignored
            handle.seek(0)
            rows = (line.split()[0] for line in handle if line.strip())
        yield from enumerate((s.strip() for s in rows), start=1)


def featurize(path: Path, limit: int | None, seed: int = 0
              ) -> tuple[list[Graph], list[tuple[int, str]]]:
    """The first ``limit`` molecules of ``path`` that RDKit accepts, as ogb graph dicts.

    ogb's ``smiles2graph`` crashes on SMILES that RDKit rejects, so each one is parsed first and
    rejected rows are returned instead. Each graph gets a regression target ``y`` (standard
    normal, seeded): the comparison measures speed, not accuracy, and both sides train on it.

    Returns:
        The graphs and the ``(row, smiles)`` pairs that were skipped.
    """
    from ogb.utils import smiles2graph
    from rdkit import Chem, RDLogger

    RDLogger.DisableLog("rdApp.*")
    graphs: list[Graph] = []
    skipped: list[tuple[int, str]] = []
    rng = np.random.default_rng(seed)
    for row, smiles in read_smiles(path):
        if limit is not None and len(graphs) >= limit:
            break
        if not smiles or Chem.MolFromSmiles(smiles) is None:
            skipped.append((row, smiles))
            continue
        graph = smiles2graph(smiles)
        graph["y"] = [float(rng.standard_normal())]
        graphs.append(graph)
    return graphs, skipped


def thread_env(threads: int) -> dict[str, str]:
    """Environment of a child process pinned to ``threads`` threads (passive OpenMP waits)."""
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               OMP_WAIT_POLICY="PASSIVE")
    return env


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (``ru_maxrss`` is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Side(Protocol):
    """What one side of the comparison supplies to the shared loops."""

    def prepare(self, graphs: list[Graph]) -> dict[str, float]:
        """Preprocesses ``graphs`` and collates every batch once; returns timings in seconds."""

    def batches(self, epoch: int) -> list[list[int]]:
        """The batches (lists of graph indices) of one pass over the data."""

    def collate(self, indices: list[int]) -> Any:
        """The model input of one batch."""

    def train_step(self, batch: Any) -> None:
        """Forward, loss, backward and optimizer step on ``batch``."""

    def infer_step(self, batch: Any) -> None:
        """Forward pass in eval mode without gradients."""


@dataclass
class LoopTimes:
    """Seconds spent in the timed steps of a loop and the graphs they processed."""

    seconds: float = 0.0
    collate_seconds: float = 0.0
    graphs: int = 0
    steps: int = 0
    batches: list[list[int]] = field(default_factory=list)


def run_loop(side: Side, passes: int, warmup: int, step: Callable[[Any], None],
             probe: Callable[[list[int]], None] | None = None) -> LoopTimes:
    """Runs ``warmup`` untimed steps, then ``passes`` timed passes over the data.

    Collation happens per step, as in a DataLoader loop, but outside the step timer (it is part
    of the preprocessing figure); its time is kept apart in ``collate_seconds``. ``probe``, if
    given, is called with each timed step's graph indices after the step, outside its timer.
    """
    first = side.batches(0)
    for indices in (first * (warmup // max(len(first), 1) + 1))[:warmup]:
        step(side.collate(indices))
    times = LoopTimes()
    for epoch in range(passes):
        for indices in side.batches(epoch):
            start = time.perf_counter()
            batch = side.collate(indices)
            times.collate_seconds += time.perf_counter() - start
            start = time.perf_counter()
            step(batch)
            times.seconds += time.perf_counter() - start
            times.graphs += len(indices)
            times.steps += 1
            times.batches.append(indices)
            del batch
            if probe is not None:
                probe(indices)
    gc.collect()
    return times


def worker_args(description: str) -> argparse.Namespace:
    """Command line of a side's child process (written by :mod:`compare_hf`)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--graphs", type=Path, required=True, help="pickle of the graphs")
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON result")
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--passes", type=int, required=True)
    parser.add_argument("--warmup", type=int, required=True)
    parser.add_argument("--profile", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", default="auto", help="ours: set_backend's choice")
    return parser.parse_args()


def save_workload(path: Path, graphs: list[Graph]) -> None:
    """Pickles the graphs for the children, with ogb's feature dims.

    The dims travel with the graphs so that our child need not import ogb (and RDKit, which
    it pulls in): featurization is the benchmark's business, not part of either side's memory.
    """
    from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims

    workload = {"graphs": graphs, "atom_feature_dims": get_atom_feature_dims(),
                "bond_feature_dims": get_bond_feature_dims()}
    path.write_bytes(pickle.dumps(workload))


def load_workload(path: Path) -> dict[str, Any]:
    """Reads what :func:`save_workload` wrote: ``graphs`` and the two feature-dim lists."""
    with path.open("rb") as handle:
        return pickle.load(handle)


def measure(side: Side, graphs: list[Graph], args: argparse.Namespace,
            probes: tuple[Callable[[list[int]], None], Callable[[list[int]], None]] | None = None
            ) -> tuple[dict[str, Any], LoopTimes, LoopTimes]:
    """Preprocessing, training and inference figures of one side.

    ``probes``: called after each timed training and inference step (see :func:`run_loop`).

    Returns:
        The summary (JSON-ready) and the raw training and inference loop times.
    """
    gc.collect()
    setup_rss = peak_rss_bytes()  # imports, model, optimizer and the raw graphs
    prep = side.prepare(graphs)
    gc.collect()
    train_probe, infer_probe = probes or (None, None)
    train = run_loop(side, args.passes, args.warmup, side.train_step, train_probe)
    infer = run_loop(side, 1, min(args.warmup, 1), side.infer_step, infer_probe)
    return {
        "molecules": len(graphs),
        "prep": prep,
        "prep_mol_per_s": len(graphs) / prep["total"],
        "train": loop_summary(train),
        "infer": loop_summary(infer),
        "setup_rss_bytes": setup_rss,
        "peak_rss_bytes": peak_rss_bytes(),  # read now: later extras must not count
    }, train, infer


def loop_summary(times: LoopTimes) -> dict[str, float]:
    """JSON-ready figures of a loop."""
    return {
        "seconds": times.seconds,
        "collate_seconds": times.collate_seconds,
        "graphs": times.graphs,
        "steps": times.steps,
        "graphs_per_s": times.graphs / times.seconds,
    }


def write_result(path: Path, result: dict[str, Any]) -> None:
    """Writes the child's result for the parent, with the peak RSS at exit as well."""
    result["peak_rss_at_exit_bytes"] = peak_rss_bytes()
    path.write_text(json.dumps(result, indent=1))


def set_mode(model: Any, training: bool) -> None:
    """``model.train(training)`` only when the mode changes, as a training loop does.

    ``train()`` walks every submodule (about 1 ms for 200 modules here); a training loop sets
    the mode once per epoch, not once per step.
    """
    if model.training != training:
        model.train(training)


def chunks(count: int, size: int) -> list[list[int]]:
    """Consecutive batches ``[0..size-1], [size..2*size-1], ...`` over ``count`` items."""
    return [list(range(start, min(start + size, count))) for start in range(0, count, size)]


def tokens_per_batch(shapes: Sequence[tuple[int, int]]) -> float:
    """Mean ``B * (1 + N)`` over batches of ``B`` graphs padded to ``N`` atoms."""
    return float(np.mean([b * (1 + n) for b, n in shapes]))
