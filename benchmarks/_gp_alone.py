"""The fingerprint GP alone on one benchmark set (``benchmarks/small_data.py --methods gp``).

The GP the default config blends in (:class:`~graphormer_sepnorm.ensemble.FingerprintGP`
on the same ``rdkit2d`` and ``morgan`` features), fitted on the training rows; test MAE and RMSE
as JSON on stdout's last line. No seed: the fit is deterministic.

    python benchmarks/_gp_alone.py SET.csv [EVIDENCE_ROWS]

``EVIDENCE_ROWS``: the hyperparameters from at most this many training molecules
(``FingerprintGP.fit``'s ``evidence_rows``; ``all`` for all; default: a fit's,
``--gp.evidence_rows``).
"""

from __future__ import annotations

import csv
import inspect
import json
import sys
import time

import numpy as np
import torch

from graphormer_sepnorm.chem.featurizers import OgbFeaturizer
from graphormer_sepnorm.ensemble.callback import FingerprintGPBlend
from graphormer_sepnorm.ensemble.fingerprint_gp import FingerprintGP, gp_columns

NAMES = ["rdkit2d", "morgan"]


DEFAULT_ROWS = inspect.signature(FingerprintGPBlend).parameters["evidence_rows"].default


def main(path: str, evidence_rows: int | None = DEFAULT_ROWS) -> None:
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    featurizer = OgbFeaturizer(mol_features=NAMES)  # smiles_csv.yaml's, so the fit's features
    x = torch.tensor(np.stack([featurizer.arrays(r["smiles"]).mol_x for r in rows]))
    y = torch.tensor([[float(r["y"])] for r in rows])
    split = np.array([r["split"] for r in rows])
    train, test = torch.tensor(split == "train"), torch.tensor(split == "test")
    gp = FingerprintGP(gp_columns(featurizer.to_config()), 1)
    started = time.process_time()
    gp.fit(x[train], y[train], evidence_rows=evidence_rows)
    fit_cpu_s = time.process_time() - started
    with torch.no_grad():
        error = (gp(x[test]) - y[test]).double().numpy()
    print(json.dumps({"test_mae": float(np.abs(error).mean()),
                      "test_rmse": float(np.sqrt((error ** 2).mean())),
                      "n_train": int(train.sum()), "evidence_rows": evidence_rows,
                      "fit_cpu_s": round(fit_cpu_s, 2), "hyper": gp.hyper[0].tolist()}))


if __name__ == "__main__":
    rows = sys.argv[2] if len(sys.argv) > 2 else DEFAULT_ROWS
    main(sys.argv[1], None if rows == "all" else int(rows))
