r"""Featurization CPU a molecule: ours (the default small-data featurizer) or chemprop's.

One thread, the first ``--limit`` SMILES of ZINC's JT-VAE list, thread CPU ms a molecule of
parsing and featurizing each: ``ours`` is ``OgbFeaturizer(mol_features=[rdkit2d, morgan])
.arrays`` (the graph, the 174 descriptors, the Morgan counts), ``chemprop`` (run by chemprop's
venv) chemprop 2.3.1's ``RDKit2DFeaturizer`` (all of ``Descriptors.descList``) and
``SimpleMoleculeMolGraphFeaturizer``. Alternate the two (and an older checkout of ours, through
``PYTHONPATH``) in one run: the machine's speed drifts.

    .venv-chemprop/bin/python benchmarks/featurize_vs_chemprop.py chemprop --limit 500
    .venv/bin/python benchmarks/featurize_vs_chemprop.py ours --limit 500
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ZINC = ROOT.parent / "shared/data/ZINC/reference/jtvae_smiles/train.txt"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("side", choices=["ours", "chemprop"])
    parser.add_argument("--limit", type=int, default=500)
    args = parser.parse_args()
    from rdkit import Chem, rdBase

    rdBase.DisableLog("rdApp.*")
    logging.disable(logging.WARNING)  # chemprop warns once a molecule about its scaling
    with open(ZINC) as handle:
        smiles = [line.split()[0] for line in itertools.islice(handle, args.limit)]
    if args.side == "chemprop":
        from chemprop.featurizers import RDKit2DFeaturizer, SimpleMoleculeMolGraphFeaturizer

        descriptors, graph = RDKit2DFeaturizer(), SimpleMoleculeMolGraphFeaturizer()

        def work(s: str) -> object:
            mol = Chem.MolFromSmiles(s)
            return descriptors(mol), graph(mol)
    else:
        from graphormer_sepnorm.chem.featurizers import OgbFeaturizer

        work = OgbFeaturizer(mol_features=["rdkit2d", "morgan"]).arrays
    started = time.thread_time()
    for s in smiles:
        work(s)
    print(f"{args.side}: {1e3 * (time.thread_time() - started) / len(smiles):.3f} thread CPU ms "
          f"a molecule, {len(smiles)} molecules, load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
