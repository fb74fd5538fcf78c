"""Featurizing a set against reading it back from the feature cache, twice, interleaved.

What each trial of a search (and each fold of a cross-validation) saves: the RDKit work of the
small-data recipe's featurizer (OGB graph, 174 RDKit descriptors, Morgan counts) on a public
set, against :func:`~graphormer_sepnorm.datasets.feature_cache.featurize_cached` reading the
same graphs back. Prints seconds and their ratio (``docs/results/hpo.md``).

Example::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/feature_cache.py data/public/freesolv.csv
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
from pathlib import Path

from graphormer_sepnorm.chem.featurizers import build_featurizer
from graphormer_sepnorm.chem.parallel import featurize_set
from graphormer_sepnorm.datasets.feature_cache import featurize_cached


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("csv", type=Path, help="a CSV with a smiles column")
    args = p.parse_args()
    with open(args.csv, newline="") as f:
        rows = [r["smiles"] for r in csv.DictReader(f)]
    featurizer = build_featurizer("ogb", mol_features=["rdkit2d", "morgan"])
    featurize_set(rows[:20], featurizer)  # RDKit's first calls
    with tempfile.TemporaryDirectory() as folder:
        for k in range(2):
            started = time.perf_counter()
            featurize_set(rows, featurizer)
            fresh = time.perf_counter() - started
            featurize_cached(rows, featurizer, f"{folder}/{k}")  # writes the file
            started = time.perf_counter()
            featurize_cached(rows, featurizer, f"{folder}/{k}")
            cached = time.perf_counter() - started
            print(f"{len(rows)} molecules: featurized {fresh:.2f} s, read back {cached:.3f} s, "
                  f"{fresh / cached:.0f}x")


if __name__ == "__main__":
    main()
