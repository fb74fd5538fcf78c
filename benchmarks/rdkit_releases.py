r"""How far each RDKit release moves the ``rdkit2d`` features and a small-data model's predictions.

Two steps. ``compute``, run by the Python of an environment with one RDKit release (the package
importable there: ``pip install rdkit==X`` beside it), featurizes the panel of
``tests/rdkit_panel.py`` and the first ``--limit`` ZINC SMILES with the default small-data
featurizer and predicts them with each ``--checkpoint`` (its GP blend included); it saves the
raw descriptors of the panel, the float32 features (as the models read them) and the
predictions to ``--out`` (``.npz``; the molecules are featurized once for all checkpoints, which
share the default featurizer).
``compare`` reads the files of several releases and writes, per release against
``--recorded``'s: the largest and median absolute difference of the float32 features (over the
174 standardized descriptors and the Morgan counts, of the values that moved), the share of
molecules whose features moved, which descriptors moved (the panel's raw values, and the
standardized descriptor columns on all), and the largest and median
absolute difference of each checkpoint's predictions, against the models' noise: the
seed-to-seed spread of the recorded release's predictions (the standard deviation over the
checkpoints, fitted with different seeds, per molecule).

    /work/rdkit_venvs/2025.3.6/bin/python benchmarks/rdkit_releases.py compute \
        --checkpoint A.ckpt B.ckpt C.ckpt --out results/rdkit_2025.3.6.npz
    .venv/bin/python benchmarks/rdkit_releases.py compare results/rdkit_*.npz \
        --recorded 2026.09.1
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ZINC = ROOT.parent / "shared/data/ZINC/reference/jtvae_smiles/train.txt"


def compute(args: argparse.Namespace) -> None:
    """Features and predictions of the panel and the ZINC molecules with this RDKit."""
    import rdkit
    import torch
    from rdkit import Chem, rdBase

    from graphormer_sepnorm.chem.mol_features import RDKit2D
    from graphormer_sepnorm.prediction.checkpoints import load_with_blend
    from graphormer_sepnorm.prediction.engine import Predictor

    sys.path.insert(0, str(ROOT / "tests"))
    from rdkit_panel import PANEL

    torch.set_num_threads(1)
    rdBase.DisableLog("rdApp.*")
    with open(args.smiles) as handle:
        zinc = [line.split()[0] for line in itertools.islice(handle, args.limit)]
    smiles = PANEL + zinc
    raw = [RDKit2D().raw(Chem.MolFromSmiles(s)) for s in PANEL]  # the panel's raw values
    predictors = [Predictor(module, 256, blend=blend)
                  for module, blend in map(load_with_blend, args.checkpoint)]
    prepared = predictors[0].prepare(smiles)  # featurized once: the models share a featurizer
    features = np.full((len(smiles), predictors[0].featurizer.mol_feature_dim), np.nan,
                       dtype=np.float32)
    for rows, graphs in prepared.batches:
        features[rows] = np.stack([g.mol_x.numpy() for g in graphs])
    predictions = [predictor.run(prepared).predictions for predictor in predictors]
    np.savez_compressed(args.out, rdkit=rdkit.__version__, smiles=np.array(smiles),
                        panel=len(PANEL), raw=np.array(raw), features=features,
                        predictions=np.stack(predictions), checkpoints=np.array(args.checkpoint),
                        names=np.array(RDKit2D().names))
    print(f"{args.out}: RDKit {rdkit.__version__}, {len(smiles)} molecules, "
          f"{len(args.checkpoint)} checkpoints")


def _moved(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise: different, NaN counting as a value."""
    return ~((a == b) | (np.isnan(a) & np.isnan(b)))


def release_row(run: dict, recorded: dict) -> dict:
    """One release's differences from the recorded release (see the module docstring)."""
    assert list(run["smiles"]) == list(recorded["smiles"]), "not the same molecules"
    feats, ref = run["features"], recorded["features"]
    moved = _moved(feats, ref)
    rows = moved.any(1)
    diff = np.abs(np.nan_to_num(feats - ref))
    pred = np.abs(run["predictions"][..., 0] - recorded["predictions"][..., 0])  # [C, M]
    spread = recorded["predictions"][..., 0].std(0, ddof=1)  # [M] over seeds
    raw_moved = _moved(run["raw"], recorded["raw"]).any(0)
    columns = len(run["names"])
    column_moved = moved[:, :columns].any(0)
    return {
        "rdkit": str(run["rdkit"]),
        "molecules moved": f"{int(rows.sum())} of {len(rows)} ({100 * rows.mean():.2f}%), "
                           f"panel {int(rows[:int(run['panel'])].sum())}",
        "max abs feature diff": float(diff.max()),
        "median abs feature diff (moved values)": float(np.median(diff[moved])) if moved.any()
        else 0.0,
        "descriptors moved (panel, raw)": [str(n) for n in run["names"][raw_moved]],
        "descriptor features moved (all)": [str(n) for n in run["names"][column_moved]],
        "max abs prediction diff": float(np.nanmax(pred)),
        "median abs prediction diff (moved molecules)": float(np.nanmedian(pred[:, rows]))
        if rows.any() else 0.0,
        "median seed-to-seed std": float(np.nanmedian(spread)),
        **{f"prediction diff > {f:g} x its seed std (molecules)": int(
            (np.nanmax(pred, 0) > f * spread).sum()) for f in (0.1, 0.5, 1.0)},
    }


def compare(args: argparse.Namespace) -> None:
    """The table of every release against the recorded one, as Markdown."""
    runs = [dict(np.load(path, allow_pickle=False)) for path in args.files]
    recorded = next(r for r in runs if str(r["rdkit"]) == args.recorded)
    rows = [release_row(r, recorded) for r in runs if r is not recorded]
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys)]
    for row in rows:
        cells = [", ".join(v) if isinstance(v, list) else f"{v:.3g}" if isinstance(v, float)
                 else str(v) for v in row.values()]
        lines.append("| " + " | ".join(cells) + " |")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    run = sub.add_parser("compute")
    run.add_argument("--checkpoint", nargs="+", required=True)
    run.add_argument("--smiles", type=Path, default=ZINC)
    run.add_argument("--limit", type=int, default=10_000)
    run.add_argument("--out", type=Path, required=True)
    table = sub.add_parser("compare")
    table.add_argument("files", nargs="+", type=Path)
    table.add_argument("--recorded", default="2026.09.1")
    args = parser.parse_args()
    compute(args) if args.step == "compute" else compare(args)


if __name__ == "__main__":
    main()
