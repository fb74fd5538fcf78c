"""The fingerprint GP alone with other descriptor kernels: does one close FreeSolv's gap?

The default's GP (:class:`~graphormer_sepnorm.ensemble.FingerprintGP`) has one RBF lengthscale
over the 174 standardized descriptors. Two common alternatives, each fitted by marginal
likelihood on the training rows (Adam on the log hyperparameters, autograd through the
Cholesky) and scored on validation and test:

- ``base``: the package's kernel, ``a * tanimoto + b * rbf(l) + s I`` (reproduces
  :class:`FingerprintGP`'s test MAE: the test below checks the predictions);
- ``linear``: plus ``c * d . d' / F_d``, a linear term on the descriptors, for physical
  properties that are close to linear in some of them (logP, TPSA);
- ``ard``: the RBF with one lengthscale per descriptor (174 more hyperparameters).

One JSON line per (set, variant) on stdout: hyperparameters, validation and test MAE.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/gp_kernel_variants.py freesolv solubility
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from graphormer_sepnorm.chem.featurizers import OgbFeaturizer
from graphormer_sepnorm.ensemble.fingerprint_gp import gp_columns
from graphormer_sepnorm.ensemble.tanimoto import log_count_tanimoto

sys.path.insert(0, str(Path(__file__).parent))
from small_data import read_set  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("base", "linear", "ard")
#: log-space start values of ``a, b, s, c`` (``FingerprintGP``'s for the first three)
START = (0.0, -1.0, -2.302585, -2.0)


def read_features(path: Path) -> tuple[Tensor, Tensor, np.ndarray, dict[str, tuple[int, int]]]:
    """The default config's molecule features ``[N, F]``, targets ``[N]``, splits, GP columns."""
    smiles, targets, splits = read_set(path)
    featurizer = OgbFeaturizer(mol_features=["rdkit2d", "morgan"])
    x = torch.tensor(np.stack([featurizer.arrays(s).mol_x for s in smiles]))
    return (x.double(), torch.tensor(targets, dtype=torch.float64), np.array(splits),
            gp_columns(featurizer.to_config()))


class Pairs:
    """What a kernel of ``a [P, F]`` against ``b [Q, F]`` needs that no hyperparameter moves.

    The Tanimoto matrix ``[P, Q]`` (computed once, not at every step of the fit) and the two
    sides' descriptors.
    """

    def __init__(self, a: Tensor, b: Tensor, columns: dict[str, tuple[int, int]]) -> None:
        (m0, m1), (d0, d1) = columns["morgan"], columns["rdkit2d"]
        self.tanimoto = log_count_tanimoto(a[:, m0:m1], b[:, m0:m1])
        self.da, self.db = a[:, d0:d1], b[:, d0:d1]


def kernel(pairs: Pairs, log: Tensor, log_lengths: Tensor, variant: str) -> Tensor:
    """The variant's kernel ``[P, Q]`` (noise not added); ``log`` = log ``a, b, s, c``."""
    width = pairs.da.shape[1]
    lengths = log_lengths.exp()
    sqdist = torch.cdist(pairs.da / lengths, pairs.db / lengths).square() / width
    hyper = log.exp()
    value = hyper[0] * pairs.tanimoto + hyper[1] * torch.exp(-sqdist / 2)
    if variant == "linear":
        value = value + hyper[3] * (pairs.da @ pairs.db.T) / width
    return value


def fit(pairs: Pairs, z: Tensor, variant: str, steps: int = 150,
        lr: float = 0.05) -> tuple[Tensor, Tensor]:
    """Log hyperparameters ``[4]`` and log lengthscales (``[F_d]`` for ARD, else ``[1]``).

    Args:
        pairs: the training molecules against themselves.
        z: their standardized targets.
        variant: one of :data:`VARIANTS`.
        steps: Adam steps on the negative log marginal likelihood. Default: 150.
        lr: Adam's learning rate. Default: 0.05.
    """
    width = pairs.da.shape[1]
    log = torch.tensor(START, dtype=torch.float64, requires_grad=True)
    log_lengths = torch.zeros(width if variant == "ard" else 1, dtype=torch.float64,
                              requires_grad=True)
    optimizer = torch.optim.Adam([log, log_lengths], lr=lr)
    eye = torch.eye(len(z), dtype=torch.float64)
    for _ in range(steps):
        cov = kernel(pairs, log, log_lengths, variant) + (log[2].exp() + 1e-6) * eye
        chol = torch.linalg.cholesky(cov)
        nll = 0.5 * (z[:, None] * torch.cholesky_solve(z[:, None], chol)).sum() + \
            chol.diagonal().log().sum()
        optimizer.zero_grad()
        nll.backward()
        if variant != "linear":
            log.grad[3] = 0.0  # c stays out of the other kernels
        optimizer.step()
    return log.detach(), log_lengths.detach()


def predict(train: Tensor, y: Tensor, others: Tensor, columns: dict[str, tuple[int, int]],
            variant: str, steps: int = 150) -> tuple[Tensor, Tensor, Tensor]:
    """Posterior means at ``others`` in ``y``'s units; the fitted log hyperparameters."""
    mean, std = y.mean(), y.std()
    z = (y - mean) / std
    pairs = Pairs(train, train, columns)
    log, log_lengths = fit(pairs, z, variant, steps)
    cov = kernel(pairs, log, log_lengths, variant) + (
        log[2].exp() + 1e-6) * torch.eye(len(z), dtype=torch.float64)
    alpha = torch.cholesky_solve(z[:, None], torch.linalg.cholesky(cov))[:, 0]
    out = kernel(Pairs(others, train, columns), log, log_lengths, variant) @ alpha
    return out * std + mean, log, log_lengths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sets", nargs="+", help="names of data/public/<set>.csv")
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data/public")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name in args.sets:
        x, y, split, columns = read_features(args.data_dir / f"{name}.csv")
        train, others = torch.from_numpy(split == "train"), torch.from_numpy(split != "train")
        where = split[split != "train"]
        for variant in args.variants:
            # the GP keeps its training features in float16: the same values here
            pred, log, log_lengths = predict(x[train].half().double(), y[train], x[others],
                                             columns, variant)
            error = (pred - y[others]).abs()
            row = {"set": name, "variant": variant,
                   "a_b_s_c": [round(float(v), 4) for v in log.exp()],
                   "lengthscale_median": round(float(log_lengths.exp().median()), 3)}
            for part in ("val", "test"):
                row[f"{part}_mae"] = round(float(error[torch.from_numpy(where == part)].mean()), 4)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
