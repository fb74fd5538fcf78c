"""benchmarks/gp_kernel_variants.py: its ``base`` variant is the package's GP."""

import sys
from pathlib import Path

import numpy as np
import torch

from graphormer_sepnorm.chem.featurizers import OgbFeaturizer
from graphormer_sepnorm.ensemble.fingerprint_gp import FingerprintGP, gp_columns

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gp_kernel_variants  # noqa: E402

SMILES = ["CCO", "CCN", "CCCO", "c1ccccc1", "c1ccccc1O", "CC(=O)O", "CCOC", "CCCCN",
          "c1ccncc1", "OCCO", "CC(C)O", "c1ccccc1C", "CCCl", "CCBr"]


def features() -> tuple[torch.Tensor, torch.Tensor, dict[str, tuple[int, int]]]:
    featurizer = OgbFeaturizer(mol_features=["rdkit2d", "morgan"])
    x = torch.tensor(np.stack([featurizer.arrays(s).mol_x for s in SMILES]))
    y = torch.linspace(-1.0, 2.0, len(SMILES), dtype=torch.float64) ** 2
    return x, y, gp_columns(featurizer.to_config())


def test_base_variant_predicts_as_the_fingerprint_gp():
    x, y, columns = features()
    train, test = slice(0, 10), slice(10, None)
    gp = FingerprintGP(columns, 1)
    gp.fit(x[train], y[train, None].float())
    with torch.no_grad():
        expected = gp(x[test])[:, 0].double()
    x16 = x.to(torch.float16).double()
    pred, log, _ = gp_kernel_variants.predict(x16[train], y[train], x[test].double(), columns,
                                              "base")
    # the same start, steps and gradient (closed form there, autograd here)
    assert torch.allclose(pred, expected, rtol=1e-4, atol=1e-4)
    assert torch.allclose(log.exp()[[0, 1, 2]], gp.hyper[0, [0, 1, 3]].double(), rtol=1e-3)


def test_linear_and_ard_variants_fit_their_own_terms():
    x, y, columns = features()
    x16 = x.to(torch.float16).double()
    width = columns["rdkit2d"][1] - columns["rdkit2d"][0]
    _, log, lengths = gp_kernel_variants.predict(x16[:10], y[:10], x16[10:], columns, "ard",
                                                 steps=5)
    assert lengths.shape == (width,) and float(log[3]) == gp_kernel_variants.START[3]
    _, log, lengths = gp_kernel_variants.predict(x16[:10], y[:10], x16[10:], columns, "linear",
                                                 steps=5)
    assert lengths.shape == (1,) and float(log[3]) != gp_kernel_variants.START[3]
