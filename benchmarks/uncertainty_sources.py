"""Which deviation ranks a small-data model's errors best: the GP's, its parts, the members' spread.

For each fitted small-data run (``benchmarks/small_data.py``'s run folders: the best checkpoint,
its blend, the data settings it records), predicts the validation and test splits and scores
candidate deviations by Spearman's correlation with the blend's absolute error:

- ``gp``: the GP's predictive deviation (what the blend reports today, before scaling);
- ``latent`` and ``noise``: its two parts (the GP's own variance at ``x``; the kernel-weighted
  leave-one-out residuals of similar training molecules);
- ``disagreement``: ``|network - GP|``, the spread of the blend's two members;
- ``gp+disagreement``: ``sqrt(gp^2 + (disagreement / 2)^2)``, both kinds of uncertainty (a
  two-member ensemble's variance is ``(d / 2)^2``);
- ``extremity``: ``|blend - training mean|`` (models shrink extreme values toward the mean).

A candidate is chosen on the validation split; the test column only reports it. Then, per run
and per kind of :class:`~graphormer_sepnorm.ensemble.blend.BlendedModel` deviation, the blend
is calibrated on the validation split (as a fit does at its best validation) and its test
coverage, NLL and Spearman printed: the figures a refit would log, without refitting.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/uncertainty_sources.py \
        runs/small_data/*/ours/seed*
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from graphormer_sepnorm.datasets.smiles_csv import SmilesCSVDataModule
from graphormer_sepnorm.ensemble.blend import DEVIATIONS, BlendedModel
from graphormer_sepnorm.ensemble.calibration import (
    coverage,
    gaussian_nll,
    spearman,
    std_error_spearman,
)
from graphormer_sepnorm.ensemble.callback import training_features
from graphormer_sepnorm.ensemble.fingerprint_gp import FingerprintGP
from graphormer_sepnorm.prediction.checkpoints import load_with_blend
from graphormer_sepnorm.training.from_checkpoint import checkpoint_data

CANDIDATES = ("gp", "latent", "noise", "disagreement", "gp+disagreement", "extremity")


def best_checkpoint(run: Path) -> Path:
    """The run's ``best-*.ckpt``."""
    found = sorted((run / "checkpoints").glob("best-*.ckpt"))
    if not found:
        raise SystemExit(f"{run}: no best-*.ckpt")
    return found[-1]


def load_run(path: Path) -> tuple[Any, BlendedModel, SmilesCSVDataModule]:
    """A checkpoint's network, blend and datamodule.

    A GP saved before it had deviations (no leave-one-out residuals) is refitted on the
    training molecules as a fit does at its start, with this code; it must predict the saved
    GP's means (checked), so the blend is the one that was tested.
    """
    module, blend = load_with_blend(path)
    if blend is None:
        raise SystemExit(f"{path}: no GP blend")
    data = SmilesCSVDataModule(**checkpoint_data(path)["init_args"])
    if not blend.gp.has_std:
        x, y = training_features(data)
        gp = FingerprintGP(dict(blend.gp.slices), blend.gp.hyper.shape[0])
        gp.fit(x, y)
        torch.testing.assert_close(gp(x), blend.gp(x), rtol=1e-3, atol=1e-3)
        blend = BlendedModel(gp, blend.weight, network=module)
    data.setup("test")
    return module.eval(), blend, data


@torch.no_grad()
def split_parts(module: Any, blend: BlendedModel, data: SmilesCSVDataModule,
                split: str) -> dict[str, Tensor]:
    """Per molecule of ``split`` (first target): target, blend, and the candidates' inputs."""
    loader = data.val_dataloader() if split == "val" else data.test_dataloader()
    rows: dict[str, list[Tensor]] = {k: [] for k in ("y", "net", "gp_mean", "latent", "noise",
                                                      "mol_x")}
    gp = blend.gp
    for batch in loader:
        net = module(batch)[:, 0]
        mean, _ = gp.predict(batch.mol_x, with_std=False)
        latent, noise = gp_variance_parts(gp, batch.mol_x)
        for key, value in (("y", batch.y[:, 0]), ("net", net), ("gp_mean", mean[:, 0]),
                           ("latent", latent), ("noise", noise), ("mol_x", batch.mol_x)):
            rows[key].append(value.float())
    parts = {k: torch.cat(v) for k, v in rows.items()}
    parts["blend"] = blend.weight * parts["gp_mean"] + (1 - blend.weight) * parts["net"]
    parts["train_mean"] = gp.y_mean.float()[0].expand_as(parts["blend"])
    return parts


def gp_variance_parts(gp: FingerprintGP, mol_x: Tensor) -> tuple[Tensor, Tensor]:
    """The GP's latent and noise variances of target 0, in the targets' squared units."""
    hyper = gp.hyper.float()[0]
    kernel = gp._kernel(gp._parts(gp._select(mol_x.float()), gp.train_x.float()), hyper)
    latent, noise = gp.variance_parts(kernel, 0, hyper)
    scale = float(gp.y_std.float()[0]) ** 2
    return (latent * scale).float(), (noise * scale).float()


def candidates(parts: dict[str, Tensor]) -> dict[str, Tensor]:
    """Each candidate deviation ``[n]``."""
    gp = (parts["latent"] + parts["noise"]).sqrt()
    spread = (parts["net"] - parts["gp_mean"]).abs()
    return {"gp": gp, "latent": parts["latent"].sqrt(), "noise": parts["noise"].sqrt(),
            "disagreement": spread, "gp+disagreement": (gp.square() + (spread / 2).square()).sqrt(),
            "extremity": (parts["blend"] - parts["train_mean"]).abs()}


def calibrated_scores(blend: BlendedModel, val: dict[str, Tensor],
                      test: dict[str, Tensor]) -> dict[str, tuple[float, float, float]]:
    """Per deviation kind: the blend calibrated on ``val`` as a fit does, scored on ``test``.

    (coverage of the 90% intervals, Gaussian NLL, std-error Spearman), as ``test`` logs them.
    """
    out = {}
    for kind in DEVIATIONS:
        blend.deviation = kind
        mean, sigma = blend.predict(val["net"][:, None], val["mol_x"], raw=True)
        blend.calibrate(mean, sigma, val["y"][:, None])
        mean, std = blend.predict(test["net"][:, None], test["mol_x"])
        y = test["y"][:, None]
        out[kind] = (float(coverage(mean, std, y)), float(gaussian_nll(mean, std, y)),
                     float(std_error_spearman(mean, std, y)))
    return out


def main(argv: list[str] | None = None) -> None:
    """Prints the candidates' Spearman per run and split, then each deviation kind's scores.

    The scores: test coverage, NLL and Spearman of the blend calibrated on validation.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (with checkpoints/)")
    args = parser.parse_args(argv)
    print("run split n " + " ".join(CANDIDATES), flush=True)
    calibrated = []
    for run in args.runs:
        module, blend, data = load_run(best_checkpoint(run))
        parts = {}
        for split in ("val", "test"):
            parts[split] = split_parts(module, blend, data, split)
            error = (parts[split]["y"] - parts[split]["blend"]).abs()
            scores = {name: float(spearman(sigma, error))
                      for name, sigma in candidates(parts[split]).items()}
            print(f"{run.parent.parent.name} {split} {len(error)} "
                  + " ".join(f"{scores[name]:.3f}" for name in CANDIDATES), flush=True)
        calibrated.append((run, calibrated_scores(blend, parts["val"], parts["test"])))
    print("\nrun deviation test_coverage90 test_nll test_spearman")
    for run, scores in calibrated:
        for kind, (cov, nll, rho) in scores.items():
            print(f"{run.parent.parent.name}/{run.name} {kind} {cov:.3f} {nll:.3f} {rho:.3f}")


if __name__ == "__main__":
    sys.exit(main())
