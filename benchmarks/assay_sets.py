r"""Public assay tables as CSVs for ``--config smiles_csv``: sparse multi-task binary, multiclass.

Nothing here is downloaded and no data goes into this repository: give the raw files, taken
from public git repositories at fixed commits (each checked by its sha256 before use).

- ``tox21``: MoleculeNet's Tox21 (12 binary assays of the Tox21 2014 challenge, 7,831
  molecules, 17% of the label cells empty), ``data/tox21.csv`` of chemprop/chemprop at commit
  b83635bcddaddcdb91d453128edec9f2be0d25cf (2018-09-23; chemprop's v1 copy of MoleculeNet's
  file), sha256 b58cc1f683e78e3c7a1bf7116e9aac0119804018d100f7b8cdb0857941c31aca.
  Columns: ``smiles`` and the 12 assays, an empty cell where an assay did not test a molecule.
- ``hiv3``: the DTP AIDS antiviral screen as MoleculeNet's HIV.csv has it (41,127 molecules;
  ``activity`` CI confirmed inactive, CM moderately active, CA confirmed active), from
  ``data/HIV.csv`` of DentonJC/virtual_screening at commit
  b492ae306f7ac5da0b89281e6978602deb9fe0dc, sha256
  b72f0cf00cd1f45ae5c415f21aef10e69187e30dd24029ddb345fbca35b0d798. Row by row its SMILES and
  ``HIV_active`` equal OGB's ogbg-molhiv (``mapping/mol.csv.gz``), which is made from the same
  file. The label is ``activity`` as a class index: CI 0, CM 1, CA 2. Every CM and CA molecule
  is kept (1,039 and 404) with a seeded random ``--hiv-inactive`` of the 39,684 CI ones (the
  full set is too slow to fit on two CPU cores), so the inactive share is far below the
  screen's 96.5%.

Each set gets a deterministic Bemis-Murcko scaffold split 80/10/10 as the ``split`` column
(:func:`graphormer_sepnorm.datasets.splits.scaffold_split`, seed 0, the same as ``--data.split
scaffold``). SMILES are kept as the sources write them; rows RDKit cannot parse are dropped and
counted: with RDKit 2026.09 eight Tox21 rows (hypervalent aluminium, ``[AlH3]``) and seven HIV
rows (all CI; aluminium, boron and germanium complexes), so ``tox21`` has 7,823 molecules.

Example (the raw files from clones of the two repositories)::

    git -C chemprop show b83635bcddaddcdb91d453128edec9f2be0d25cf:data/tox21.csv > /tmp/tox21.csv
    git -C virtual_screening show b492ae306f7ac5da0b89281e6978602deb9fe0dc:data/HIV.csv \
        > /tmp/HIV.csv
    .venv/bin/python benchmarks/assay_sets.py --tox21 /tmp/tox21.csv --hiv /tmp/HIV.csv
"""

from __future__ import annotations

import argparse
import csv
import hashlib
from collections import Counter
from pathlib import Path

import numpy as np
from rdkit import Chem, RDLogger

from graphormer_sepnorm.datasets.splits import murcko_scaffold, scaffold_split

ROOT = Path(__file__).resolve().parents[1]
TOX21_SHA256 = "b58cc1f683e78e3c7a1bf7116e9aac0119804018d100f7b8cdb0857941c31aca"
HIV_SHA256 = "b72f0cf00cd1f45ae5c415f21aef10e69187e30dd24029ddb345fbca35b0d798"
TOX21_TASKS = ["NR-AR", "NR-AR-LBD", "NR-AhR", "NR-Aromatase", "NR-ER", "NR-ER-LBD",
               "NR-PPAR-gamma", "SR-ARE", "SR-ATAD5", "SR-HSE", "SR-MMP", "SR-p53"]
HIV_CLASSES = {"CI": 0, "CM": 1, "CA": 2}
SPLIT_NAMES = ("train", "val", "test")


def checked_rows(path: Path, sha256: str) -> list[dict[str, str]]:
    """The rows of a raw CSV whose sha256 must be ``sha256``.

    Raises:
        SystemExit: naming the file, when its checksum differs.
    """
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != sha256:
        raise SystemExit(f"{path}: sha256 {digest}, expected {sha256} (not the pinned file)")
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def parsable(rows: list[dict[str, str]], name: str) -> list[dict[str, str]]:
    """The rows whose SMILES RDKit parses; the others are counted on stdout."""
    RDLogger.DisableLog("rdApp.*")
    kept = [r for r in rows if Chem.MolFromSmiles(r["smiles"]) is not None]
    if len(kept) < len(rows):
        print(f"{name}: {len(rows) - len(kept)} unparsable SMILES dropped")
    return kept


def split_column(smiles: list[str]) -> list[str]:
    """``train``/``val``/``test`` of each molecule: the scaffold split 80/10/10, seed 0."""
    parts = scaffold_split([murcko_scaffold(s) for s in smiles], (0.8, 0.1, 0.1), seed=0)
    labels = [""] * len(smiles)
    for name, indices in zip(SPLIT_NAMES, parts, strict=True):
        for i in indices:
            labels[i] = name
    return labels


def tox21(path: Path) -> tuple[list[str], list[list[str]]]:
    """Header and rows of ``tox21.csv``: ``smiles``, the 12 assays (empty: untested), split."""
    rows = parsable(checked_rows(path, TOX21_SHA256), "tox21")
    splits = split_column([r["smiles"] for r in rows])
    return (["smiles", *TOX21_TASKS, "split"],
            [[r["smiles"], *(r[t] for t in TOX21_TASKS), k] for r, k in zip(rows, splits,
                                                                            strict=True)])


def hiv3(path: Path, inactive: int) -> tuple[list[str], list[list[str]]]:
    """Header and rows of ``hiv3.csv``: ``smiles``, ``activity`` (0 CI, 1 CM, 2 CA), split.

    Every CM and CA row, and ``inactive`` CI rows drawn at random (seed 0), in file order.
    """
    rows = parsable(checked_rows(path, HIV_SHA256), "hiv")
    ci = [i for i, r in enumerate(rows) if r["activity"] == "CI"]
    drawn = set(np.random.default_rng(0).choice(ci, size=inactive, replace=False).tolist())
    rows = [r for i, r in enumerate(rows) if r["activity"] != "CI" or i in drawn]
    splits = split_column([r["smiles"] for r in rows])
    return (["smiles", "activity", "split"],
            [[r["smiles"], str(HIV_CLASSES[r["activity"]]), k]
             for r, k in zip(rows, splits, strict=True)])


def describe(name: str, header: list[str], rows: list[list[str]]) -> None:
    """Prints a set's split sizes, its empty label cells and its label counts per split."""
    labels = header[1:-1]
    cells = [row[1:-1] for row in rows]
    empty = sum(v == "" for c in cells for v in c) / (len(cells) * len(labels))
    print(f"{name}: {len(rows)} molecules, {len(labels)} label column(s), {empty:.1%} empty")
    for split in SPLIT_NAMES:
        mine = [c for c, row in zip(cells, rows, strict=True) if row[-1] == split]
        counts = Counter(v for c in mine for v in c if v != "")
        print(f"  {split}: {len(mine)} molecules, labels {dict(sorted(counts.items()))}")


def write(path: Path, header: list[str], rows: list[list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--tox21", type=Path, help="chemprop's data/tox21.csv (pinned above)")
    parser.add_argument("--hiv", type=Path, help="MoleculeNet's HIV.csv (pinned above)")
    parser.add_argument("--hiv-inactive", type=int, default=2557,
                        help="CI molecules drawn for hiv3 (default 2557: 4,000 in all)")
    parser.add_argument("--out", type=Path, default=ROOT / "data" / "assay")
    args = parser.parse_args(argv)
    if args.tox21:
        header, rows = tox21(args.tox21)
        write(args.out / "tox21.csv", header, rows)
        describe("tox21", header, rows)
    if args.hiv:
        header, rows = hiv3(args.hiv, args.hiv_inactive)
        write(args.out / "hiv3.csv", header, rows)
        describe("hiv3", header, rows)


if __name__ == "__main__":
    main()
