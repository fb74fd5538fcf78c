"""Predict molecular properties from SMILES with a trained Graphormer checkpoint.

Python::

    from graphormer_sepnorm.predict import predict_smiles
    frame = predict_smiles(["CCO", "c1ccccc1O"], checkpoint="zinc")
    frame, vectors = predict_smiles(["CCO"], checkpoint="model.ckpt", return_embeddings=True)

Command line (also ``python -m graphormer_sepnorm.predict``)::

    graphormer-sepnorm-predict molecules.smi -o preds.csv --checkpoint zinc

Bad rows never stop a run (unless ``--strict``): they get a reason in the ``error`` column and no
prediction. Checkpoints are loaded with ``torch.load(weights_only=True)`` only.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from graphormer_sepnorm.prediction.checkpoints import (
    BUNDLED_CHECKPOINTS,
    DEFAULT_CHECKPOINT,
    CheckpointError,
    load_checkpoint,
)
from graphormer_sepnorm.prediction.engine import Predictor
from graphormer_sepnorm.prediction.ensembles import predictor_models
from graphormer_sepnorm.prediction.io import InputError
from graphormer_sepnorm.prediction.runner import StrictError, predict_file, resolve_device
from graphormer_sepnorm.training.module import GraphormerModule

__all__ = ["CheckpointError", "load_checkpoint", "main", "predict_file", "predict_smiles"]


def predict_smiles(
    smiles: str | Sequence[Any],
    checkpoint: str | Path | GraphormerModule | Sequence[str | Path] = DEFAULT_CHECKPOINT,
    batch_size: int = 256,
    return_embeddings: bool = False,
    device: str | torch.device | None = None,
    num_workers: int = 0,
    features: pd.DataFrame | None = None,
) -> pd.DataFrame | tuple[pd.DataFrame, np.ndarray]:
    """Predicts a property for each SMILES.

    Args:
        smiles: One SMILES or a sequence of them (``None``/NaN count as empty).
        checkpoint: A bundled model name (``'molhiv'``, ``'zinc'``), a checkpoint file (with
            the fingerprint GP saved beside its network, if any: the predictions are then the
            blend's), an already loaded :class:`GraphormerModule` (see
            :func:`load_checkpoint`; the network alone), or several checkpoints (a packed fit's
            counts as its replicas): an ensemble
            (:mod:`~graphormer_sepnorm.prediction.ensembles`).
        batch_size: Molecules per model batch; results do not depend on it.
        return_embeddings: Also return the graph-token embeddings (one model only).
        device: Where the model runs; default: where the module is (CPU for a file).
        num_workers: Featurization processes (0: in this process).
        features: the model's descriptor columns (``dataset_info['feature_columns']``), one
            row per SMILES, when it was fit with ``--data.feature_columns``.

    Returns:
        A DataFrame with one row per input, in order: ``smiles``, the prediction column(s)
        (``<target>`` for regression, ``<target>_probability`` for binary tasks,
        ``<target>_class<k>_probability`` for multiclass ones; an ensemble adds
        ``<column>_std`` for each, and a calibrated regression one ``<target>_lo90`` and
        ``_hi90``; NaN when flagged), and ``error`` (``''`` when fine, else the reason). With
        ``return_embeddings``, the tuple ``(frame, embeddings)``, ``embeddings`` a float32
        ``[n, D]`` array of graph-token embeddings after the final norm, NaN rows when flagged.

    Raises:
        CheckpointError: Unknown, missing or unsafe checkpoint, or members that disagree.
        InputError: ``features`` lacks a descriptor column the model reads.
    """
    items = [smiles] if isinstance(smiles, str) else list(smiles)
    blend, calibration = None, None
    if isinstance(checkpoint, GraphormerModule):
        models: Any = checkpoint
    else:
        models, blend, calibration, _ = predictor_models(checkpoint)
    with Predictor(models, batch_size, device, num_workers, blend=blend,
                   calibration=calibration) as predictor:
        table = pd.DataFrame({"smiles": items})
        if predictor.feature_columns:
            if features is None:
                raise InputError(f"the model reads descriptor columns "
                                 f"{predictor.feature_columns}: pass them as features=")
            table = pd.concat([table, features.reset_index(drop=True)], axis=1)
        rows = predictor.rows_of(table, "smiles")
        step = max(1, -(-len(rows) // (num_workers + 1)))  # featurized in parallel
        chunks = [rows[i:i + step] for i in range(0, len(rows), step)] or [[]]
        results = [r for _, r in predictor.predict_stream(chunks, list, return_embeddings)]
    predictions = np.concatenate([r.predictions for r in results])
    frame = pd.DataFrame({"smiles": items})
    frame = pd.concat([frame, pd.DataFrame(predictions, columns=predictor.columns)], axis=1)
    frame["error"] = [e for r in results for e in r.errors]
    if not return_embeddings:
        return frame
    return frame, np.concatenate([r.embeddings for r in results])


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``graphormer-sepnorm-predict``."""
    parser = argparse.ArgumentParser(
        prog="graphormer-sepnorm-predict",
        description="Predict properties of the molecules in a SMILES file (.csv, .tsv, .smi, "
                    ".txt, optionally .gz). Output: the input columns, the prediction "
                    "column(s), then 'error' (empty when fine).")
    add = parser.add_argument
    add("input", type=Path, help="input file")
    add("-o", "--output", type=Path, default=None,
        help="output CSV (default: <input stem>_preds.csv next to the input)")
    add("--checkpoint", nargs="+", default=[DEFAULT_CHECKPOINT],
        help=f"checkpoint file, or a bundled model: {', '.join(BUNDLED_CHECKPOINTS)} "
             f"(default: {DEFAULT_CHECKPOINT}); several (or a packed fit's) predict as an "
             "ensemble: their mean, a <column>_std for each column, and for regression a "
             "90%% interval calibrated on held-out molecules of their data")
    add("--smiles-column", default="smiles", help="SMILES column of a CSV/TSV (default: smiles)")
    add("--batch-size", type=int, default=256, help="molecules per batch (default: 256)")
    add("--accelerator", default="cpu", help="cpu, gpu/cuda, mps or auto (default: cpu)")
    add("--devices", default="auto", help="1, or [i] for device i (default: auto)")
    add("--overwrite", action="store_true", help="replace existing output files")
    add("--strict", action="store_true",
        help="stop with a non-zero exit at the first row that cannot be predicted, "
             "writing no output")
    add("--embeddings", type=Path, default=None, metavar="FILE.npy",
        help="also write graph-token embeddings [rows, D] (NaN rows where flagged)")
    add("--no-progress", action="store_true", help="no progress bar (off anyway if not a TTY)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit code.

    0 ok, 1 ``--strict`` stop, 2 unusable input or checkpoint, 130 Ctrl-C; after a non-zero
    exit no output file was written.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        parser.error("--batch-size must be at least 1")
    try:
        device = resolve_device(args.accelerator, args.devices)
        summary = predict_file(
            args.input, args.output, args.checkpoint, args.smiles_column, args.batch_size,
            device, args.overwrite, args.strict, args.embeddings,
            progress=False if args.no_progress else None)
    except StrictError as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        notes = "; ".join(getattr(e, "__notes__", []))
        print(f"{parser.prog}: interrupted{': ' + notes if notes else ''}", file=sys.stderr)
        return 130
    except (InputError, CheckpointError, ValueError) as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 2
    print(f"{parser.prog}: {summary.line()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
