"""Pretraining targets: standardized RDKit 2D descriptors of the ZINC molecules.

Reads the 249,456 ZINC SMILES (``reference/jtvae_smiles/{train,valid,test}.txt`` under
``--zinc-dir``; line *i* of each is row *i* of ``smiles/full_{train,val,test}_y.csv``, whose
columns are only the benchmark label ``y`` and ``sa_risk``, no SMILES), computes every descriptor
of ``rdkit.Chem.Descriptors.descList`` per molecule and writes a CSV for
:class:`~graphormer_sepnorm.datasets.SmilesCSVDataModule`: ``smiles``, one column per kept
descriptor, ``split``.

Descriptor selection and transforms are fitted on the training rows only:

1. drop descriptors that are NaN/inf on more than ``--max-nan`` of the rows, then drop the rows
   where a remaining one is NaN/inf;
2. drop (near-)constant descriptors: one value on more than ``--max-mode`` of the rows;
3. transform heavy-tailed ones (|skewness| > ``--skew``): ``log1p`` if never negative, else
   signed ``log1p`` (``sign(x) * log1p(|x|)``), whichever of raw/transformed is less skewed;
4. clip at the 0.1% / 99.9% quantiles of the (transformed) training values;
5. drop near-duplicates: in ``descList`` order, a descriptor whose |Pearson r| with an already
   kept one exceeds ``--max-corr`` is dropped;
6. standardize with the training mean and std, so every target column is in std units (the
   model's ``standardize_targets`` then changes nothing, and ``val/mae`` is a mean MAE in std
   units across descriptors).

The fitted spec (descriptor, transform, clip bounds, mean, std) goes to ``--spec-out``;
``--spec-in`` applies a saved spec instead of fitting one, so the targets are reproducible. The
package's spec, ``graphormer_sepnorm/chem/rdkit2d_descriptors.json``, is the one the bundled
``pretrained`` model learned and the ``rdkit2d`` molecule features apply
(:mod:`graphormer_sepnorm.chem.mol_features`); it was fitted with ``--sample 120000``.

Splits: ZINC train+val rows are ``train`` except a random ``--val-fraction`` that is ``val``;
ZINC test rows are ``test``. ``--sample N`` keeps a random N of the train+val rows (all test
rows are kept).

    OMP_NUM_THREADS=1 python benchmarks/pretrain_data.py --workers 2 \
        --spec-in graphormer_sepnorm/chem/rdkit2d_descriptors.json \
        --out data/pretrain/zinc_descriptors_full.csv
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import time
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import numpy as np
from rdkit import Chem, RDLogger, rdBase
from rdkit.Chem import Descriptors

from graphormer_sepnorm.chem.mol_features import SPEC_PATH, apply_transform, transform_descriptors

ROOT = Path(__file__).resolve().parents[1]
ZINC_DIR = Path("/work/shared/data/ZINC")
SPLIT_FILES = [("train", "train.txt"), ("val", "valid.txt"), ("test", "test.txt")]
NAMES = [name for name, _ in Descriptors.descList]


def read_zinc(zinc_dir: Path) -> dict[str, list[str]]:
    """The SMILES of ZINC's train, val and test splits, in file order."""
    out = {}
    for split, name in SPLIT_FILES:
        with open(zinc_dir / "reference" / "jtvae_smiles" / name) as handle:
            out[split] = [line.split()[0] for line in handle if line.strip()]
    return out


def describe(smiles: str) -> list[float]:
    """All ``descList`` descriptors of one molecule (NaN where RDKit fails)."""
    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        return [math.nan] * len(NAMES)
    values = Descriptors.CalcMolDescriptors(mol, missingVal=math.nan)
    return [float(values[name]) for name in NAMES]


def _init_worker() -> None:
    RDLogger.DisableLog("rdApp.*")


def compute(smiles: list[str], workers: int) -> np.ndarray:
    """Descriptor matrix (molecules x ``descList``), with progress every 10,000 molecules."""
    out = np.empty((len(smiles), len(NAMES)), dtype=np.float64)
    started = time.perf_counter()

    def progress(i: int) -> None:
        if (i + 1) % 10000 == 0 or i + 1 == len(smiles):
            rate = (i + 1) / (time.perf_counter() - started)
            print(f"  {i + 1:,}/{len(smiles):,} molecules, {rate:.0f}/s, "
                  f"{(len(smiles) - i - 1) / rate / 60:.1f} min left", flush=True)

    if workers <= 1:
        _init_worker()
        with rdBase.BlockLogs():
            for i, s in enumerate(smiles):
                out[i] = describe(s)
                progress(i)
    else:
        with Pool(workers, initializer=_init_worker) as pool:
            for i, row in enumerate(pool.imap(describe, smiles, chunksize=256)):
                out[i] = row
                progress(i)
    return out


def _skew(x: np.ndarray) -> float:
    std = x.std()
    return 0.0 if std == 0 else float(np.mean(((x - x.mean()) / std) ** 3))


def fit_spec(raw: np.ndarray, train: np.ndarray, args: argparse.Namespace
             ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Chooses descriptors and their transforms on the training rows (see the module doc)."""
    finite = np.isfinite(raw[train])
    nan_share = 1.0 - finite.mean(axis=0)
    usable = [j for j in range(len(NAMES)) if nan_share[j] <= args.max_nan]
    dropped: dict[str, list[str]] = {
        "mostly_nan": [NAMES[j] for j in range(len(NAMES)) if nan_share[j] > args.max_nan]}
    rows = train[np.isfinite(raw[train][:, usable]).all(axis=1)]
    dropped["constant"], dropped["duplicate"] = [], []
    candidates = []
    for j in usable:
        x = raw[rows, j]
        _, counts = np.unique(x, return_counts=True)
        if counts.max() / len(x) > args.max_mode:
            dropped["constant"].append(NAMES[j])
            continue
        transform = "identity"
        skew = _skew(x)
        if abs(skew) > args.skew:
            option = "log1p" if x.min() >= 0 else "signed_log1p"
            if abs(_skew(apply_transform(x, option))) < abs(skew):
                transform = option
        y = apply_transform(x, transform)
        lo, hi = (float(v) for v in np.quantile(y, [args.clip, 1.0 - args.clip]))
        y = np.clip(y, lo, hi)
        if y.std() == 0:
            dropped["constant"].append(NAMES[j])
            continue
        candidates.append((j, transform, lo, hi, y))
    matrix = np.corrcoef(np.stack([c[4] for c in candidates]))
    kept: list[int] = []
    spec = []
    for k, (j, transform, lo, hi, y) in enumerate(candidates):
        twins = [m for m in kept if abs(matrix[k, m]) > args.max_corr]
        if twins:
            dropped["duplicate"].append(f"{NAMES[j]} (r={matrix[k, twins[0]]:+.3f} with "
                                        f"{NAMES[candidates[twins[0]][0]]})")
            continue
        kept.append(k)
        spec.append({"name": NAMES[j], "transform": transform, "clip": [lo, hi],
                     "mean": float(y.mean()), "std": float(y.std()),
                     "raw_skew": round(_skew(raw[rows, j]), 3),
                     "skew": round(_skew(y), 3)})
    return spec, dropped


def apply_spec(raw: np.ndarray, spec: list[dict[str, Any]]) -> np.ndarray:
    """Standardized targets (molecules x spec) from the full descriptor matrix."""
    return transform_descriptors(raw[:, [NAMES.index(item["name"]) for item in spec]], spec)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--zinc-dir", type=Path, default=ZINC_DIR)
    parser.add_argument("--out", type=Path, default=ROOT / "data/pretrain/zinc_descriptors.csv")
    parser.add_argument("--spec-out", type=Path,
                        default=ROOT / "data/pretrain/rdkit2d_descriptors.json",
                        help="where a fitted spec goes (the package's own is "
                             f"{SPEC_PATH.relative_to(ROOT)}: copy it there deliberately)")
    parser.add_argument("--spec-in", type=Path, default=None,
                        help="apply this saved spec instead of fitting one")
    parser.add_argument("--sample", type=int, default=0,
                        help="random N of the ZINC train+val rows (0: all); test rows all kept")
    parser.add_argument("--limit", type=int, default=0,
                        help="first N SMILES of each ZINC split only (quick checks)")
    parser.add_argument("--val-fraction", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1, help="processes (default: 1)")
    parser.add_argument("--max-nan", type=float, default=0.01)
    parser.add_argument("--max-mode", type=float, default=0.99,
                        help="drop a descriptor whose most common value covers this share")
    parser.add_argument("--skew", type=float, default=1.0)
    parser.add_argument("--clip", type=float, default=0.001)
    parser.add_argument("--max-corr", type=float, default=0.98)
    args = parser.parse_args(argv)

    zinc = read_zinc(args.zinc_dir)
    if args.limit:
        zinc = {k: v[:args.limit] for k, v in zinc.items()}
    pool = zinc["train"] + zinc["val"]
    rng = np.random.default_rng(args.seed)
    if args.sample and args.sample < len(pool):
        pool = [pool[i] for i in sorted(rng.choice(len(pool), args.sample, replace=False))]
    n_val = round(args.val_fraction * len(pool))
    val_rows = set(rng.choice(len(pool), n_val, replace=False).tolist())
    smiles = pool + zinc["test"]
    splits = np.array(["val" if i in val_rows else "train" for i in range(len(pool))]
                      + ["test"] * len(zinc["test"]))
    print(f"{len(smiles):,} molecules ({len(pool) - n_val:,} train, {n_val:,} val, "
          f"{len(zinc['test']):,} test), {len(NAMES)} descriptors, {args.workers} worker(s)",
          flush=True)
    started = time.perf_counter()
    raw = compute(smiles, args.workers)
    minutes = (time.perf_counter() - started) / 60

    if args.spec_in:
        spec = json.loads(args.spec_in.read_text())["descriptors"]
        dropped: dict[str, list[str]] = {}
    else:
        spec, dropped = fit_spec(raw, np.flatnonzero(splits == "train"), args)
    targets = apply_spec(raw, spec)
    good = np.isfinite(targets).all(axis=1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["smiles", *[item["name"] for item in spec], "split"])
        for i in np.flatnonzero(good):
            writer.writerow([smiles[i], *(f"{v:.4g}" for v in targets[i]), splits[i]])
    counts = {s: int(((splits == s) & good).sum()) for s in ("train", "val", "test")}
    transforms = {t: sum(item["transform"] == t for item in spec)
                  for t in ("identity", "log1p", "signed_log1p")}
    print(f"{len(spec)} descriptors kept ({transforms}); dropped: "
          f"{ {k: len(v) for k, v in dropped.items()} }; rows {counts} "
          f"({int((~good).sum())} dropped for NaN/inf); descriptors took {minutes:.1f} min")
    print(f"wrote {args.out}")
    if not args.spec_in:
        args.spec_out.write_text(json.dumps({
            "source": "ZINC 250k (JT-VAE SMILES), reference/jtvae_smiles/{train,valid,test}.txt",
            "rdkit": rdBase.rdkitVersion,
            "settings": {k: (str(v) if isinstance(v, Path) else v)
                         for k, v in vars(args).items()
                         if k not in ("out", "spec_out", "spec_in", "zinc_dir")},
            "rows": counts, "descriptor_minutes": round(minutes, 1),
            "transforms": transforms, "dropped": dropped, "descriptors": spec,
        }, indent=1) + "\n")
        print(f"wrote {args.spec_out}")


if __name__ == "__main__":
    main()
