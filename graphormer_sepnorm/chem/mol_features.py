"""Molecule-level features for the readout: RDKit 2D descriptors and Morgan counts.

chemprop's "extra molecule features", here beside the graph token: the head reads
``[graph-token embedding, features]`` (:class:`~graphormer_sepnorm.nn.model.Graphormer`, config
``mol_feature_dim``). They are computed from the parsed molecule by the featurizer
(``--data.mol_features '[rdkit2d, morgan]'``), whose config travels in the checkpoint, so
prediction computes the same features with no setting of its own.

- ``rdkit2d``: the 174 RDKit 2D descriptors the bundled ``pretrained`` model learned to predict,
  each transformed, clipped and standardized exactly as for that pretraining (fitted on ZINC's
  training molecules: ``rdkit2d_descriptors.json`` beside this file, written by
  ``benchmarks/pretrain_data.py``). Fixed statistics, not the user's: a model's features mean
  the same on any data, and values outside ZINC's range are clipped to it. A descriptor RDKit
  cannot compute is 0 (the ZINC mean).
- ``morgan``: counts of Morgan (ECFP4-like) substructures, radius 2, folded to 2,048 bits, as
  ``log1p(count)``.
"""

from __future__ import annotations

import contextlib
import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from rdkit import Chem
from rdkit.Chem import Descriptors, rdFingerprintGenerator

from graphormer_sepnorm.chem.layout import MORGAN_BITS, SPEC_PATH, descriptor_spec
from graphormer_sepnorm.chem.rdkit_shortcuts import (
    ESTATE_EXTREMES,
    QED_REUSED,
    descriptor_function,
    estate_indices,
    qed_from_descriptors,
)

__all__ = ["MOL_FEATURES", "SPEC_PATH", "DescriptorTransform", "MolFeatures", "MorganCounts",
           "RDKit2D", "RDKit2DFast", "RDKit2DLean", "RDKit2DScreen", "apply_transform",
           "build_mol_features", "descriptor_spec", "qed_from_descriptors",
           "transform_descriptors"]


def apply_transform(x: np.ndarray, kind: str) -> np.ndarray:
    """``identity``, ``log1p`` (of ``max(x, 0)``) or ``signed_log1p`` (``sign(x) log1p(|x|)``)."""
    if kind == "identity":
        return x
    if kind == "log1p":
        return np.log1p(np.maximum(x, 0.0))
    if kind == "signed_log1p":
        return np.sign(x) * np.log1p(np.abs(x))
    raise ValueError(f"unknown transform {kind!r}")


def transform_descriptors(raw: np.ndarray, spec: Sequence[dict[str, Any]]) -> np.ndarray:
    """Raw descriptor values ``[..., len(spec)]`` to standardized ones (NaN stays NaN).

    Per descriptor: its :func:`apply_transform`, then clipped to ``clip``, then
    ``(x - mean) / std`` (see :class:`DescriptorTransform`).
    """
    return DescriptorTransform(spec)(raw)


class DescriptorTransform:
    """:func:`transform_descriptors` for one spec, its columns grouped by transform.

    A few array operations per call instead of a few per descriptor: 0.47 ms a molecule on
    its own, a twentieth of the descriptors' cost, when done one descriptor at a time.

    Args:
        spec: per descriptor, its ``transform``, ``clip`` ``[lo, hi]``, ``mean`` and ``std``.
    """

    def __init__(self, spec: Sequence[dict[str, Any]]) -> None:
        kinds = [item["transform"] for item in spec]
        for kind in set(kinds):
            apply_transform(np.zeros(1), kind)  # an unknown transform raises here
        self.groups = {kind: np.array([k for k, other in enumerate(kinds) if other == kind])
                       for kind in dict.fromkeys(kinds)}
        self.lo, self.hi = (np.array([item["clip"][i] for item in spec], dtype=np.float64)
                            for i in (0, 1))
        self.mean = np.array([item["mean"] for item in spec], dtype=np.float64)
        self.std = np.array([item["std"] for item in spec], dtype=np.float64)

    def __call__(self, raw: np.ndarray) -> np.ndarray:
        """``[..., D]`` raw values to standardized ones, float64 (NaN stays NaN)."""
        x = np.array(raw, dtype=np.float64)
        if x.shape[-1] != len(self.mean):
            raise ValueError(f"{x.shape[-1]} descriptor columns for a spec of {len(self.mean)}")
        for kind, columns in self.groups.items():
            x[..., columns] = apply_transform(x[..., columns], kind)
        return (np.clip(x, self.lo, self.hi) - self.mean) / self.std


class MolFeatures(ABC):
    """A fixed-length float vector per molecule.

    Attributes:
        name: Registry name (:data:`MOL_FEATURES`).
        dim: Length of the vector.
    """

    name: ClassVar[str]
    dim: int

    @abstractmethod
    def __call__(self, mol: Chem.Mol) -> np.ndarray:
        """``[dim]`` float32 features of a parsed molecule (left unmodified)."""


class RDKit2D(MolFeatures):
    """The pretraining's 174 standardized RDKit 2D descriptors (see the module docstring).

    Examples:
        >>> values = RDKit2D()(Chem.MolFromSmiles("CCO"))
        >>> values.shape, values.dtype.name, bool(np.isfinite(values).all())
        ((174,), 'float32', True)
    """

    name = "rdkit2d"

    def __init__(self) -> None:
        self.spec = descriptor_spec(self.name)
        functions = dict(Descriptors.descList)
        # RDKit recomputes the E-state indices for each of these four (force=1) and caches them
        # on the molecule for the VSA ones: force=0 computes them once a molecule, 7% of the
        # time; estate_indices computes them as RDKit does, in array operations. Other
        # shortcuts: descriptor_function
        self._estate = any(item["name"] in ESTATE_EXTREMES for item in self.spec)
        self.functions = [descriptor_function(item["name"], functions[item["name"]])
                          for item in self.spec]
        self.transform = DescriptorTransform(self.spec)
        self.dim = len(self.spec)
        names = [item["name"] for item in self.spec]
        # QED's properties repeat five of the descriptors (Crippen logP among them, a quarter
        # of QED's time): computed after them, it takes theirs (qed_from_descriptors)
        self._qed_at = names.index("qed") if {"qed", *QED_REUSED} <= set(names) else None
        if self._qed_at is not None:
            self._reused = [names.index(name) for name in QED_REUSED]

    def __call__(self, mol: Chem.Mol) -> np.ndarray:
        """``[174]`` float32 standardized descriptors."""
        return np.nan_to_num(self.transform(self.raw(mol)), nan=0.0).astype(np.float32)

    def raw(self, mol: Chem.Mol) -> np.ndarray:
        """``[174]`` float64 RDKit values, before the transforms (NaN where RDKit raises)."""
        if self._estate and not hasattr(mol, "_eStateIndices"):  # where RDKit caches them
            # where they cannot be computed RDKit's own raise below, inside _safe (NaN)
            with contextlib.suppress(Exception):
                mol._eStateIndices = estate_indices(mol)
        raw = _floats(_values(self.functions, mol, skip=self._qed_at))  # QED's after (below)
        if self._qed_at is not None:
            raw[self._qed_at] = _safe(functools.partial(
                qed_from_descriptors, reused=raw[self._reused].tolist()), mol)
        return raw


def _values(functions: Sequence[Any], mol: Chem.Mol, skip: int | None = None) -> list[Any]:
    """Each function's value for ``mol`` as returned, NaN where it raises and at ``skip``."""
    # one list and one conversion (_floats) a molecule, not a _safe call a value: 174 fewer
    values = []
    for k, function in enumerate(functions):
        if k == skip:
            values.append(math.nan)
            continue
        try:
            values.append(function(mol))
        except Exception:  # RDKit raises assorted types on odd molecules; the value is unknown
            values.append(math.nan)
    return values


def _floats(values: list[Any]) -> np.ndarray:
    """:func:`_safe`'s conversion, of all values at once: float64, NaN where not finite."""
    try:
        raw = np.array(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):  # a value float() may refuse: one by one
        raw = np.array([_safe(float, value) for value in values])
    raw[~np.isfinite(raw)] = math.nan
    return raw


def _safe(function: Any, mol: Chem.Mol) -> float:
    """One descriptor's value, NaN where RDKit raises or gives a non-finite number."""
    try:
        value = float(function(mol))
    except Exception:  # RDKit raises assorted types on odd molecules; the value is then unknown
        return math.nan
    return value if math.isfinite(value) else math.nan


class MorganCounts(MolFeatures):
    """``log1p`` counts of Morgan substructures, radius 2, folded to ``size`` bits.

    Examples:
        >>> values = MorganCounts()(Chem.MolFromSmiles("CCO"))
        >>> values.shape, float(values.max()) > 0
        ((2048,), True)
    """

    name = "morgan"

    def __init__(self, radius: int = 2, size: int = MORGAN_BITS) -> None:
        self.generator = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=size)
        self.dim = size

    def __call__(self, mol: Chem.Mol) -> np.ndarray:
        """``[size]`` float32 ``log1p`` counts."""
        counts = self.generator.GetCountFingerprintAsNumPy(mol)
        return np.log1p(counts.astype(np.float32))


class RDKit2DFast(RDKit2D):
    """:class:`RDKit2D` without its costliest descriptors (``chem.layout.FAST_LEFT_OUT``).

    The same transforms and statistics for the 150 it keeps, about a third of the time.

    Examples:
        >>> RDKit2DFast()(Chem.MolFromSmiles("CCO")).shape
        (150,)
    """

    name = "rdkit2d_fast"


class RDKit2DScreen(RDKit2D):
    """:class:`RDKit2D` without BCUT2D, SPS, BertzCT, AvgIpc (``chem.layout.SCREEN_LEFT_OUT``).

    The same transforms and statistics for the 163 it keeps, QED among them.

    Examples:
        >>> RDKit2DScreen()(Chem.MolFromSmiles("CCO")).shape
        (163,)
    """

    name = "rdkit2d_screen"


class RDKit2DLean(RDKit2D):
    """:class:`RDKit2D` without QED, BCUT2D, SPS, BertzCT, AvgIpc (``chem.layout.LEAN_LEFT_OUT``).

    The same transforms and statistics for the 162 it keeps, about half the time.

    Examples:
        >>> RDKit2DLean()(Chem.MolFromSmiles("CCO")).shape
        (162,)
    """

    name = "rdkit2d_lean"


MOL_FEATURES: dict[str, type[MolFeatures]] = {"rdkit2d": RDKit2D, "rdkit2d_screen": RDKit2DScreen,
                                              "rdkit2d_lean": RDKit2DLean,
                                              "rdkit2d_fast": RDKit2DFast,
                                              "morgan": MorganCounts}


def build_mol_features(names: Sequence[str]) -> list[MolFeatures]:
    """The feature generators ``names`` (each of :data:`MOL_FEATURES`, at most once), in order.

    Raises:
        ValueError: An unknown or repeated name.
    """
    unknown = [n for n in names if n not in MOL_FEATURES]
    if unknown:
        raise ValueError(f"unknown molecule features {unknown}; choose from "
                         f"{sorted(MOL_FEATURES)}")
    if len(set(names)) != len(names):
        raise ValueError(f"molecule features repeated: {list(names)}")
    return [MOL_FEATURES[n]() for n in names]
