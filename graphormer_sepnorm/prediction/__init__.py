"""Prediction on SMILES: safe checkpoint loading, streaming featurization and batching, file I/O.

The user-facing entry points live in :mod:`graphormer_sepnorm.predict`. Names here are imported
lazily, so that featurization worker processes never import Lightning.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "BUNDLED_CHECKPOINTS": "checkpoints",
    "CheckpointError": "checkpoints",
    "bundled_checkpoint_path": "checkpoints",
    "load_checkpoint": "checkpoints",
    "load_with_blend": "checkpoints",
    "ChunkResult": "engine",
    "Predictor": "engine",
    "prediction_columns": "engine",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
