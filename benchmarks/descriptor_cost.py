r"""What each of the ``rdkit2d`` molecule features' 174 RDKit descriptors costs, on one thread.

Times the descriptors of ``graphormer_sepnorm/rdkit2d_descriptors.json`` as
:class:`~graphormer_sepnorm.chem.mol_features.RDKit2D` computes them: its functions (RDKit's
own from ``Descriptors.descList``, or the shortcuts of ``chem.rdkit_shortcuts`` that give their
values), in the spec's order, on the same molecule object one after the other
(several RDKit descriptors cache work on the molecule, e.g. Gasteiger charges or Crippen
contributions, and the first one to need it pays; QED last, from the five descriptors it
reuses), then the recorded transforms. Per descriptor:

- ``seq ms``: its CPU time in that order (molecule by molecule, each call timed with the
  thread's CPU clock, the clock's own cost subtracted), so the column sums to the raw
  descriptors' cost; the table is sorted by it, with the cumulative share.
- ``alone ms``: its CPU time on fresh molecules (nothing cached), what it costs without the
  others. ``alone`` well above ``seq`` marks a descriptor that reuses an earlier one's work:
  dropping it saves only ``seq``, and dropping the earlier one moves the shared cost to it.

Beside them, per molecule: parsing (the package's ``parse_smiles``), the OGB graph (atom and bond
features: ``OgbFeaturizer().arrays`` minus parsing), the Morgan counts (``MorganCounts``), the
whole ``RDKit2D`` (raw descriptors and transforms, as one call a molecule), its transforms alone
(as it runs them, one molecule a call, and on all molecules at once) and the whole
featurization of the default config (``OgbFeaturizer(mol_features=[rdkit2d, morgan]).arrays``).
Every figure is the minimum over ``--repeats`` of the thread's CPU time (``time.thread_time``),
which a busy machine inflates less than wall time.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/descriptor_cost.py \
        --out results/descriptor_cost.md
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import argparse  # noqa: E402
import csv  # noqa: E402
import functools  # noqa: E402
import itertools  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import rdkit  # noqa: E402
from rdkit import Chem, RDLogger  # noqa: E402

from graphormer_sepnorm.chem.featurizers import OgbFeaturizer  # noqa: E402
from graphormer_sepnorm.chem.mol_features import (  # noqa: E402
    MorganCounts,
    RDKit2D,
    _safe,
    transform_descriptors,
)
from graphormer_sepnorm.chem.rdkit_shortcuts import qed_from_descriptors  # noqa: E402
from graphormer_sepnorm.chem.smiles import parse_smiles  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from small_data import git_commit  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ZINC = ROOT.parent / "shared" / "data" / "ZINC" / "smiles" / "subset_test.csv"


def read_smiles(path: Path, column: str, limit: int) -> list[str]:
    """The first ``limit`` SMILES of ``column`` in a CSV."""
    with open(path, newline="") as handle:
        return [row[column] for row in itertools.islice(csv.DictReader(handle), limit)]


def cpu_seconds(work: Callable[[], object], repeats: int,
                setup: Callable[[], object] = lambda: None) -> float:
    """Least CPU time of this thread over ``repeats`` calls of ``work`` (``setup`` untimed)."""
    best = float("inf")
    for _ in range(repeats):
        setup()
        started = time.thread_time()
        work()
        best = min(best, time.thread_time() - started)
    return best


def timer_overhead(samples: int = 100_000) -> float:
    """Median nanoseconds between two back-to-back ``time.thread_time_ns`` readings."""
    gaps = np.empty(samples)
    for i in range(samples):
        started = time.thread_time_ns()
        gaps[i] = time.thread_time_ns() - started
    return float(np.median(gaps))


def descriptor_times(mols: Sequence[Chem.Mol], rdkit2d: RDKit2D, repeats: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Per descriptor, CPU seconds over all molecules: in sequence, and alone (fresh molecules).

    Both loop as ``RDKit2D`` does, molecule by molecule and each molecule's descriptors in order
    (looping descriptor by descriptor over the molecules runs about a third faster, the CPU's
    caches staying warm, and would understate the real cost), QED last from the five values it
    reuses (``qed_from_descriptors``), each call timed on its own with the thread's CPU clock,
    less the clock's own cost (:func:`timer_overhead`).

    Args:
        mols: the parsed molecules, never given to a descriptor (copies are).
        rdkit2d: the descriptors, their functions in the order ``RDKit2D`` calls them.
        repeats: the least of this many runs is kept, per descriptor.

    Returns:
        ``(seq, alone)``, each ``[len(functions)]`` seconds: ``seq`` on one copy of each molecule
        for all descriptors in order, ``alone`` on a fresh copy for every call.
    """
    clock = time.thread_time_ns
    overhead = timer_overhead()
    functions = list(rdkit2d.functions)
    qed_at = rdkit2d._qed_at  # RDKit2D computes QED after the others, from five of them
    order = [k for k in range(len(functions)) if k != qed_at] + ([qed_at] * (qed_at is not None))
    seq = np.full(len(functions), np.inf)
    alone = np.full(len(functions), np.inf)
    for _ in range(repeats):
        for fresh, best in ((False, seq), (True, alone)):
            spent = np.zeros(len(functions))
            for original in mols:
                mol, values = Chem.Mol(original), [math.nan] * len(functions)
                for k in order:
                    if fresh:
                        mol = Chem.Mol(original)
                    function = functions[k] if k != qed_at else functools.partial(
                        qed_from_descriptors, reused=[values[i] for i in rdkit2d._reused])
                    started = clock()
                    values[k] = _safe(function, mol)
                    spent[k] += clock() - started - overhead
            np.minimum(best, spent * 1e-9, out=best)
    return seq, alone


FAMILIES = ("fr_", "BCUT2D_", "Chi", "Kappa", "EState_VSA", "VSA_EState", "SMR_VSA", "SlogP_VSA",
            "PEOE_VSA", "FpDensityMorgan", "Num")


def family(name: str) -> str:
    """The descriptor's family (a shared name prefix or suffix), or its own name."""
    for prefix in FAMILIES:
        if name.startswith(prefix):
            return prefix + "*"
    for suffix in ("EStateIndex", "PartialCharge"):
        if name.endswith(suffix):
            return "*" + suffix
    return name


def report(args: argparse.Namespace, n: int, spec: Sequence[dict], seq: np.ndarray,
           alone: np.ndarray, whole: dict[str, float], load: tuple[float, float]) -> str:
    """The Markdown report: conditions, per-molecule totals, the sorted descriptor table."""
    ms = 1e3 / n
    order = np.argsort(-seq)
    share = np.cumsum(seq[order]) / seq.sum()
    families: dict[str, list[int]] = {}
    for k, item in enumerate(spec):
        families.setdefault(family(item["name"]), []).append(k)
    grouped = sorted(families.items(), key=lambda kv: -seq[kv[1]].sum())
    lines = [
        "# Cost of the `rdkit2d` descriptors, per molecule, one thread",
        "",
        f"{n} molecules of `{args.smiles}` (column `{args.column}`); CPU time of the thread, "
        f"least of {args.repeats} repeats; commit {git_commit(ROOT)}, RDKit {rdkit.__version__}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average "
        f"{load[0]:.1f} at the start and {load[1]:.1f} at the end (other processes running); "
        f"{datetime.now(timezone.utc).isoformat(timespec='minutes')}. Made by "
        "`benchmarks/descriptor_cost.py` (its docstring says what each figure is).",
        "",
        "| per molecule | ms |", "| --- | --- |",
        *(f"| {name} | {seconds * ms:.3f} |" for name, seconds in whole.items()),
        f"| the 174 raw descriptors, summed in sequence (`seq`) | {seq.sum() * ms:.3f} |",
        f"| the 174 raw descriptors, summed alone | {alone.sum() * ms:.3f} |",
        "",
        "By family (name prefix or suffix; the cached work a family shares is paid once, by its "
        "first member, so a family's `seq` sum is what dropping all of it saves):",
        "",
        "| family | descriptors | seq ms/mol | share | alone ms/mol (summed) |",
        "| --- | --- | --- | --- | --- |",
        *(f"| {name} | {len(ks)} | {seq[ks].sum() * ms:.3f} | "
          f"{100 * seq[ks].sum() / seq.sum():.1f}% | {alone[ks].sum() * ms:.3f} |"
          for name, ks in grouped if len(ks) > 1),
        "",
        "Every descriptor:",
        "",
        "| rank | descriptor | transform | seq ms/mol | cumulative share | alone ms/mol |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for rank, (k, cum) in enumerate(zip(order, share, strict=True), 1):
        lines.append(f"| {rank} | {spec[k]['name']} | {spec[k]['transform']} | "
                     f"{seq[k] * ms:.4f} | {100 * cum:.1f}% | {alone[k] * ms:.4f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--smiles", type=Path, default=ZINC,
                        help="a CSV of SMILES (default: ZINC-subset's 1,000 test molecules)")
    parser.add_argument("--column", default="smiles")
    parser.add_argument("-n", type=int, default=1000, help="molecules (the first N)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="the Markdown report")
    args = parser.parse_args(argv)
    RDLogger.DisableLog("rdApp.*")
    load_start = os.getloadavg()[0]
    smiles = read_smiles(args.smiles, args.column, args.n)
    mols = [parse_smiles(s) for s in smiles]
    n = len(mols)
    rdkit2d, morgan = RDKit2D(), MorganCounts()
    graph, full = OgbFeaturizer(), OgbFeaturizer(mol_features=["rdkit2d", "morgan"])
    work: list[Chem.Mol] = []

    def fresh() -> None:
        work[:] = [Chem.Mol(m) for m in mols]

    parse = cpu_seconds(lambda: [parse_smiles(s) for s in smiles], args.repeats)
    whole = {
        "parsing (`parse_smiles`)": parse,
        "OGB graph features (`OgbFeaturizer().arrays` minus parsing)":
            cpu_seconds(lambda: [graph.arrays(s) for s in smiles], args.repeats) - parse,
        "Morgan counts (`MorganCounts`, radius 2, 2,048 bits)":
            cpu_seconds(lambda: [morgan(m) for m in work], args.repeats, fresh),
        "`RDKit2D` (174 descriptors and their transforms, one call a molecule)":
            cpu_seconds(lambda: [rdkit2d(m) for m in work], args.repeats, fresh),
        "whole featurization of the default config (`OgbFeaturizer(mol_features=[rdkit2d, "
        "morgan]).arrays`, parsing included)":
            cpu_seconds(lambda: [full.arrays(s) for s in smiles], args.repeats),
    }
    seq, alone = descriptor_times(mols, rdkit2d, args.repeats)
    raw = np.array([[_safe(f, m) for f in rdkit2d.functions] for m in work])
    whole["`RDKit2D`'s transforms alone (`transform_descriptors` and `nan_to_num`, one call a "
          "molecule)"] = cpu_seconds(lambda: [np.nan_to_num(transform_descriptors(r, rdkit2d.spec))
                                             for r in raw], args.repeats)
    whole["the same transforms on all molecules' descriptors at once (one call)"] = cpu_seconds(
        lambda: np.nan_to_num(transform_descriptors(raw, rdkit2d.spec)), args.repeats)
    text = report(args, n, rdkit2d.spec, seq, alone, whole, (load_start, os.getloadavg()[0]))
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
