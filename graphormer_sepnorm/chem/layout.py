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

__all__ = ["DESCRIPTOR_FEATURES", "FAST_LEFT_OUT", "LEAN_LEFT_OUT", "LEFT_OUT", "MORGAN_BITS",
           "SCREEN_LEFT_OUT", "SPEC_PATH", "descriptor_spec", "feature_columns", "mol_feature_dim"]

#: The descriptors' recorded transforms and statistics (``benchmarks/pretrain_data.py`` wrote it).
SPEC_PATH = Path(__file__).with_name("rdkit2d_descriptors.json")
#: Width of the folded Morgan counts (``morgan``).
MORGAN_BITS = 2048
#: The descriptors ``rdkit2d_fast`` leaves out of ``rdkit2d``'s: the costliest to compute, 4.8 of
#: the 7.5 ms a ZINC molecule's descriptors take in sequence (``benchmarks/descriptor_cost.py``):
#: QED (its structural alerts, 1.6 ms), the BCUT2D family (a Gasteiger-charge Burden matrix
#: eigen-decomposition), SPS, BertzCT, AvgIpc, the 2nd-4th order Chi indices, the Morgan
#: fingerprint densities (Morgan counts are a feature of their own), Phi, Kappa3, BalabanJ.
FAST_LEFT_OUT = frozenset({
    "qed", "SPS", "BertzCT", "AvgIpc", "Chi2n", "Chi2v", "Chi3n", "Chi3v", "Chi4n", "Chi4v",
    "FpDensityMorgan1", "FpDensityMorgan2", "FpDensityMorgan3", "Phi", "Kappa3", "BalabanJ",
    "BCUT2D_MWHI", "BCUT2D_MWLOW", "BCUT2D_CHGHI", "BCUT2D_CHGLO", "BCUT2D_LOGPHI",
    "BCUT2D_LOGPLOW", "BCUT2D_MRHI", "BCUT2D_MRLOW"})
#: The descriptors ``rdkit2d_lean`` leaves out: the five costliest families once QED reuses the
#: descriptors it repeats (1.5 of 3.6 ms a ZINC molecule): QED (its structural alerts), the
#: BCUT2D family, SPS, BertzCT, AvgIpc. It keeps the Chi, Kappa and Morgan-density ones.
LEAN_LEFT_OUT = frozenset({
    "qed", "SPS", "BertzCT", "AvgIpc", "BCUT2D_MWHI", "BCUT2D_MWLOW", "BCUT2D_CHGHI",
    "BCUT2D_CHGLO", "BCUT2D_LOGPHI", "BCUT2D_LOGPLOW", "BCUT2D_MRHI", "BCUT2D_MRLOW"})
#: The descriptors ``rdkit2d_screen`` leaves out: ``rdkit2d_lean``'s but QED (whose loss, with
#: BCUT2D's, made ``rdkit2d_lean`` worse on D4 Ki).
SCREEN_LEFT_OUT = LEAN_LEFT_OUT - {"qed"}
#: Each descriptor feature and what it leaves out of the recorded spec.
LEFT_OUT = {"rdkit2d": frozenset(), "rdkit2d_screen": SCREEN_LEFT_OUT,
            "rdkit2d_lean": LEAN_LEFT_OUT, "rdkit2d_fast": FAST_LEFT_OUT}
#: The descriptor features: all of the spec's, or the spec's without some (:data:`LEFT_OUT`).
DESCRIPTOR_FEATURES = tuple(LEFT_OUT)


@cache
def descriptor_spec(name: str = "rdkit2d") -> tuple[dict[str, Any], ...]:
    """The descriptors of feature ``name``: ``name``, ``transform``, ``clip``, ``mean``, ``std``.

    ``rdkit2d``: all the recorded ones; the others: those without their :data:`LEFT_OUT`.
    """
    if name == "rdkit2d":
        return tuple(json.loads(SPEC_PATH.read_text())["descriptors"])
    if name in LEFT_OUT:  # the file read once, by the cached call above
        return tuple(item for item in descriptor_spec() if item["name"] not in LEFT_OUT[name])
    raise ValueError(f"no descriptor feature {name!r}; choose from {DESCRIPTOR_FEATURES}")


def mol_feature_dim(name: str) -> int:
    """Width of a molecule feature: ``rdkit2d`` 174 (fewer for its subsets), ``morgan`` 2,048.

    The subsets: ``rdkit2d_screen`` 163, ``rdkit2d_lean`` 162, ``rdkit2d_fast`` 150.

    Raises:
        ValueError: An unknown name.
    """
    if name in DESCRIPTOR_FEATURES:
        return len(descriptor_spec(name))
    if name == "morgan":
        return MORGAN_BITS
    raise ValueError(f"unknown molecule feature {name!r}; choose from "
                     f"{sorted(['morgan', *DESCRIPTOR_FEATURES])}")


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
