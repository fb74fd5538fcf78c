"""The molecule features' layout, known without RDKit: names, widths and column ranges.

The model (``mol_feature_dim``) and the fingerprint GP (which columns are Morgan counts, which
descriptors) need only where each feature sits in ``mol_x``, not how it is computed, so training
from prepared arrays on a machine without RDKit imports this and never
:mod:`~graphormer_sepnorm.chem.mol_features` (whose generators compute the values with RDKit).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["MORGAN_BITS", "SPEC_PATH", "descriptor_spec", "feature_columns", "mol_feature_dim"]

#: The descriptors' recorded transforms and statistics (``benchmarks/pretrain_data.py`` wrote it).
SPEC_PATH = Path(__file__).with_name("rdkit2d_descriptors.json")
#: Width of the folded Morgan counts (``morgan``).
MORGAN_BITS = 2048


@cache
def descriptor_spec() -> tuple[dict[str, Any], ...]:
    """The recorded descriptors: ``name``, ``transform``, ``clip`` bounds, ``mean``, ``std``."""
    return tuple(json.loads(SPEC_PATH.read_text())["descriptors"])


def mol_feature_dim(name: str) -> int:
    """Width of one molecule feature: ``rdkit2d`` (174 descriptors) or ``morgan`` (2,048).

    Raises:
        ValueError: An unknown name.
    """
    if name == "rdkit2d":
        return len(descriptor_spec())
    if name == "morgan":
        return MORGAN_BITS
    raise ValueError(f"unknown molecule feature {name!r}; choose from ['morgan', 'rdkit2d']")


def feature_columns(names: Sequence[str]) -> dict[str, tuple[int, int]]:
    """Column ranges ``(start, stop)`` of each feature in ``mol_x`` (concatenated in order).

    Examples:
        >>> feature_columns(["rdkit2d", "morgan"])
        {'rdkit2d': (0, 174), 'morgan': (174, 2222)}
    """
    columns, start = {}, 0
    for name in names:
        columns[name] = (start, start + mol_feature_dim(name))
        start = columns[name][1]
    return columns
