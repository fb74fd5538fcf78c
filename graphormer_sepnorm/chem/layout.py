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

__all__ = ["DESCRIPTOR_FEATURES", "MORGAN_BITS", "REMOVED_FEATURES", "SPEC_PATH",
           "check_feature_name", "descriptor_spec", "feature_columns", "mol_feature_dim"]

#: The descriptors' recorded transforms and statistics (``benchmarks/pretrain_data.py`` wrote it).
SPEC_PATH = Path(__file__).with_name("rdkit2d_descriptors.json")
#: Width of the folded Morgan counts (``morgan``).
MORGAN_BITS = 2048
#: Names of the descriptor features (``rdkit2d``, all the descriptors of the spec).
DESCRIPTOR_FEATURES = ("rdkit2d",)
#: Subsets of ``rdkit2d`` that earlier versions offered only to featurize faster, and how many
#: descriptors each kept; a model fitted on one needs the version it was fitted with.
REMOVED_FEATURES = {"rdkit2d_screen": 163, "rdkit2d_lean": 162, "rdkit2d_fast": 150}


def check_feature_name(name: str) -> None:
    """Raises a ``ValueError`` for a molecule feature this version does not compute.

    A removed subset of ``rdkit2d`` (:data:`REMOVED_FEATURES`) gets its own message: what it
    was, and what to do with a model or config that names it.
    """
    if name in REMOVED_FEATURES:
        raise ValueError(
            f"molecule feature {name!r} was removed: it was a subset of 'rdkit2d' "
            f"({REMOVED_FEATURES[name]} of its 174 descriptors) kept only to featurize faster. "
            "Fit with 'rdkit2d' instead (--data.mol_features '[rdkit2d, morgan]'); a checkpoint "
            f"fitted with {name!r} predicts only with graphormer-sepnorm 0.1.0 as of commit "
            "e9c1873, the last to compute it")
    if name not in ("morgan", *DESCRIPTOR_FEATURES):
        raise ValueError(f"unknown molecule feature {name!r}; choose from "
                         f"{sorted(['morgan', *DESCRIPTOR_FEATURES])}")


@cache
def descriptor_spec(name: str = "rdkit2d") -> tuple[dict[str, Any], ...]:
    """The recorded descriptors: ``name``, ``transform``, ``clip``, ``mean``, ``std`` each.

    Raises:
        ValueError: ``name`` is not a descriptor feature (:func:`check_feature_name`).
    """
    check_feature_name(name)
    if name not in DESCRIPTOR_FEATURES:
        raise ValueError(f"{name!r} is not a descriptor feature; choose from "
                         f"{DESCRIPTOR_FEATURES}")
    return tuple(json.loads(SPEC_PATH.read_text())["descriptors"])


def mol_feature_dim(name: str) -> int:
    """Width of a molecule feature: ``rdkit2d`` 174, ``morgan`` 2,048.

    Raises:
        ValueError: An unknown or removed name (:func:`check_feature_name`).
    """
    check_feature_name(name)
    return MORGAN_BITS if name == "morgan" else len(descriptor_spec(name))


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
