r"""What each of the ``rdkit2d`` features' 174 RDKit descriptors costs, before and after sharing.

Per descriptor, its thread CPU time a molecule computed two ways on the same molecules, the two
alternated molecule by molecule (a busy machine slows both alike):

- ``own``: RDKit's own function of each (``Descriptors.descList``), in the spec's order on one
  molecule object, as ``RDKit2D`` computed them until issue 64 (RDKit caches a few things on
  the molecule: the first descriptor that needs one pays for it);
- ``shared``: ``RDKit2D``'s steps now (:class:`~graphormer_sepnorm.chem.shared_descriptors.\
SharedDescriptors`: the E-state indices, BCUT2D and QED's properties computed once; QED last).

Beside them, per molecule: parsing, the OGB graph, the Morgan counts, the transforms and the
whole featurization of the default config (``OgbFeaturizer(mol_features=[rdkit2d, morgan])``),
each the least over ``--repeats``. Each call is timed with ``time.thread_time_ns`` less the
clock's own cost. Writes Markdown (``--out``): totals, families, then every descriptor.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/descriptor_cost.py --limit 1000 \
        --out results/descriptor_cost.md
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import rdkit
from rdkit import Chem, rdBase

from graphormer_sepnorm.chem.featurizers import OgbFeaturizer
from graphormer_sepnorm.chem.mol_features import MorganCounts, RDKit2D
from graphormer_sepnorm.chem.shared_descriptors import qed_from
from graphormer_sepnorm.chem.smiles import parse_smiles

sys.path.insert(0, str(Path(__file__).resolve().parent))
from small_data import git_commit  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ZINC = ROOT.parent / "shared/data/ZINC/reference/jtvae_smiles/train.txt"
FAMILIES = ("fr_", "BCUT2D_", "Chi", "Kappa", "EState_VSA", "VSA_EState", "SMR_VSA", "SlogP_VSA",
            "PEOE_VSA", "FpDensityMorgan", "Num")


def family(name: str) -> str:
    """The descriptor's family (a shared prefix or suffix), or its own name."""
    prefix = next((p for p in FAMILIES if name.startswith(p)), None)
    if prefix:
        return prefix + "*"
    suffix = next((s for s in ("EStateIndex", "PartialCharge") if name.endswith(s)), None)
    return "*" + suffix if suffix else name


def clock_cost(samples: int = 50_000) -> int:
    """Median nanoseconds between two back-to-back thread-clock readings."""
    gaps = []
    for _ in range(samples):
        started = time.thread_time_ns()
        gaps.append(time.thread_time_ns() - started)
    return int(np.median(gaps))


def per_descriptor(mols: list[Chem.Mol], rdkit2d: RDKit2D) -> tuple[np.ndarray, np.ndarray]:
    """Nanoseconds per descriptor over ``mols``: RDKit's own functions, and the shared steps."""
    clock, overhead = time.thread_time_ns, clock_cost()
    shared = rdkit2d.shared
    own_ns, shared_ns = np.zeros(len(shared.steps)), np.zeros(len(shared.steps))
    order = [k for k in range(len(shared.steps)) if k != shared.qed_at]
    for original in mols:
        mol = Chem.Mol(original)
        for k, function in enumerate(rdkit2d.functions):
            started = clock()
            _safe(function, mol)
            own_ns[k] += clock() - started - overhead
        mol, memo, values = Chem.Mol(original), {}, [math.nan] * len(shared.steps)
        for k in order:
            started = clock()
            values[k] = _safe(shared.steps[k], mol, memo)
            shared_ns[k] += clock() - started - overhead
        if shared.qed_at is not None:
            reused = {name: values[k] for name, k in shared.reused.items()}
            started = clock()
            _safe(qed_from, mol, reused)
            shared_ns[shared.qed_at] += clock() - started - overhead
    return own_ns, shared_ns


def _safe(work: Callable[..., object], *args: object) -> object:
    try:
        return work(*args)
    except Exception:  # RDKit raises assorted types on odd molecules
        return math.nan


def least_ms(work: Callable[[], object], rows: int, repeats: int) -> float:
    """Least thread CPU milliseconds a row over ``repeats`` runs of ``work``."""
    best = math.inf
    for _ in range(repeats):
        started = time.thread_time()
        work()
        best = min(best, time.thread_time() - started)
    return 1e3 * best / rows


def markdown(names: list[str], own: np.ndarray, shared: np.ndarray, parts: dict[str, float],
             header: str) -> str:
    """The totals, the families and every descriptor (ms a molecule), own against shared."""
    lines = [header, "", "| per molecule | ms |", "| --- | --- |",
             *(f"| {k} | {v:.3f} |" for k, v in parts.items()), "",
             "| family | descriptors | own ms | shared ms | shared / own |",
             "| --- | --- | --- | --- | --- |"]
    groups: dict[str, list[int]] = {}
    for k, name in enumerate(names):
        groups.setdefault(family(name), []).append(k)
    for fam, ks in sorted(groups.items(), key=lambda item: -own[item[1]].sum()):
        a, b = own[ks].sum(), shared[ks].sum()
        lines.append(f"| {fam} | {len(ks)} | {a:.3f} | {b:.3f} | {b / a:.2f} |")
    lines.append(f"| all | {len(names)} | {own.sum():.3f} | {shared.sum():.3f} | "
                 f"{shared.sum() / own.sum():.2f} |")
    lines += ["", "| rank | descriptor | own ms | shared ms |", "| --- | --- | --- | --- |"]
    for rank, k in enumerate(np.argsort(-own, kind="stable"), 1):
        lines.append(f"| {rank} | {names[k]} | {own[k]:.4f} | {shared[k]:.4f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smiles", type=Path, default=ZINC, help="one SMILES a line")
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with open(args.smiles) as handle:
        smiles = [line.split()[0] for line in itertools.islice(handle, args.limit)]
    rdBase.DisableLog("rdApp.*")
    mols, rdkit2d, morgan = [Chem.MolFromSmiles(s) for s in smiles], RDKit2D(), MorganCounts()
    load = os.getloadavg()[0]
    best_own, best_shared = np.full(174, np.inf), np.full(174, np.inf)
    for _ in range(args.repeats):
        own, shared = per_descriptor(mols, rdkit2d)
        best_own, best_shared = np.minimum(best_own, own), np.minimum(best_shared, shared)
    n, featurizer, plain = len(mols), OgbFeaturizer(mol_features=["rdkit2d", "morgan"]), \
        OgbFeaturizer()
    raw = np.array([rdkit2d.raw(Chem.Mol(m)) for m in mols])
    parts = {
        "parsing (`parse_smiles`)": least_ms(lambda: [parse_smiles(s) for s in smiles], n,
                                             args.repeats),
        "OGB graph, parsing included (`OgbFeaturizer().arrays`)": least_ms(
            lambda: [plain.arrays(s) for s in smiles], n, args.repeats),
        "Morgan counts": least_ms(lambda: [morgan(m) for m in mols], n, args.repeats),
        "the 174 descriptors, RDKit's own functions (before)": 1e-6 * best_own.sum() / n,
        "the 174 descriptors, shared intermediates (now)": 1e-6 * best_shared.sum() / n,
        "their transforms (one molecule a call)": least_ms(
            lambda: [rdkit2d.transform(r) for r in raw], n, args.repeats),
        "whole default featurization now (`OgbFeaturizer(mol_features=[rdkit2d, morgan])`)":
            least_ms(lambda: [featurizer.arrays(s) for s in smiles], n, args.repeats),
    }
    header = (f"{n} molecules of `{args.smiles.name}`; thread CPU, least of {args.repeats}; "
              f"commit {git_commit(ROOT)}, RDKit {rdkit.__version__}, {platform.machine()}, "
              f"{os.cpu_count()} cores, load {load:.1f} -> {os.getloadavg()[0]:.1f}, "
              f"{datetime.now(timezone.utc).isoformat(timespec='minutes')}")
    text = markdown(rdkit2d.names, 1e-6 * best_own / n, 1e-6 * best_shared / n, parts, header)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
