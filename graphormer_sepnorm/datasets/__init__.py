"""Lightning datamodules: ZINC, ZINC-subset, OGB MolHIV, and users' SMILES CSV files.

Imported on first use, so that a machine without RDKit or ogb (a GPU node fed with prepared
arrays, :class:`PreparedDataModule`) imports none of them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from graphormer_sepnorm.datasets.base import GraphDataModule
    from graphormer_sepnorm.datasets.mirror import MIRROR_ENV, DatasetUnavailableError
    from graphormer_sepnorm.datasets.molhiv import MolHIVDataModule
    from graphormer_sepnorm.datasets.prepared import PreparedDataModule
    from graphormer_sepnorm.datasets.smiles_csv import SmilesCSVDataModule
    from graphormer_sepnorm.datasets.zinc import ZINCDataModule

_WHERE = {
    "GraphDataModule": "base",
    "MIRROR_ENV": "mirror",
    "DatasetUnavailableError": "mirror",
    "MolHIVDataModule": "molhiv",
    "PreparedDataModule": "prepared",
    "SmilesCSVDataModule": "smiles_csv",
    "ZINCDataModule": "zinc",
}

__all__ = [
    "MIRROR_ENV",
    "DatasetUnavailableError",
    "GraphDataModule",
    "MolHIVDataModule",
    "PreparedDataModule",
    "SmilesCSVDataModule",
    "ZINCDataModule",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
