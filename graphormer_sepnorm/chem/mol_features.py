"""Molecule-level features for the readout: RDKit 2D descriptors and Morgan counts.

chemprop's "extra molecule features", here beside the graph token: the head reads
``[graph-token embedding, features]`` (:class:`~graphormer_sepnorm.nn.model.Graphormer`, config
``mol_feature_dim``). They are computed from the parsed molecule by the featurizer
(``--data.mol_features '[rdkit2d, morgan]'``), whose config travels in the checkpoint, so
prediction computes the same features with no setting of its own.

- ``rdkit2d``: the 174 RDKit 2D descriptors the bundled ``pretrained`` model learned to predict,
  each RDKit's own value of that name (``Descriptors.descList``; what several share computed
  once a molecule, :mod:`~graphormer_sepnorm.chem.shared_descriptors`; the RDKit
  versions that have them all and give the recorded values are ``pyproject.toml``'s), then
  transformed, clipped and standardized exactly as for that pretraining (fitted on ZINC's
  training molecules: ``rdkit2d_descriptors.json`` beside this file, written by
  ``benchmarks/pretrain_data.py``). Fixed statistics, not the user's: a model's features mean
  the same on any data, and values outside ZINC's range are clipped to it. A descriptor RDKit
  cannot compute is 0 (the ZINC mean).
- ``morgan``: counts of Morgan (ECFP4-like) substructures, radius 2, folded to 2,048 bits, as
  ``log1p(count)``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
from rdkit import Chem, rdBase
from rdkit.Chem import Descriptors, rdFingerprintGenerator

from graphormer_sepnorm.chem.layout import (
    MORGAN_BITS,
    SPEC_PATH,
    check_feature_name,
    descriptor_spec,
)
from graphormer_sepnorm.chem.shared_descriptors import SharedDescriptors

__all__ = ["MOL_FEATURES", "SPEC_PATH", "DescriptorTransform", "MolFeatures", "MorganCounts",
           "RDKit2D", "apply_transform", "build_mol_features", "descriptor_functions",
           "descriptor_spec", "transform_descriptors"]


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


def descriptor_functions(names: Sequence[str]) -> list[Callable[[Chem.Mol], Any]]:
    """RDKit's public function of each named descriptor (``Descriptors.descList``), in order.

    Raises:
        RuntimeError: The installed RDKit lacks one of them (``pyproject.toml`` gives the
            versions that have them all).
    """
    available = dict(Descriptors.descList)
    missing = [name for name in names if name not in available]
    if missing:
        raise RuntimeError(f"RDKit {rdBase.rdkitVersion} lacks the descriptors {missing} of "
                           f"{SPEC_PATH.name}; install an RDKit that has them (the range "
                           "graphormer-sepnorm's requirements give)")
    return [available[name] for name in names]


class RDKit2D(MolFeatures):
    """The pretraining's 174 standardized RDKit 2D descriptors (see the module docstring).

    Each is RDKit's own value from ``Descriptors.descList``: its function called on the
    molecule in the spec's order, or, where several share an intermediate (the E-state indices,
    BCUT2D, QED's properties), derived from it computed once
    (:class:`~graphormer_sepnorm.chem.shared_descriptors.SharedDescriptors`).

    Examples:
        >>> values = RDKit2D()(Chem.MolFromSmiles("CCO"))
        >>> values.shape, values.dtype.name, bool(np.isfinite(values).all())
        ((174,), 'float32', True)
    """

    name = "rdkit2d"

    def __init__(self) -> None:
        self.spec = descriptor_spec(self.name)
        self.names = [item["name"] for item in self.spec]
        self.functions = descriptor_functions(self.names)
        self.shared = SharedDescriptors(self.names, self.functions)
        self.transform = DescriptorTransform(self.spec)
        self.dim = len(self.spec)

    def __call__(self, mol: Chem.Mol) -> np.ndarray:
        """``[174]`` float32 standardized descriptors."""
        return np.nan_to_num(self.transform(self.raw(mol)), nan=0.0).astype(np.float32)

    def raw(self, mol: Chem.Mol) -> np.ndarray:
        """``[174]`` float64 RDKit values, before the transforms (NaN where RDKit raises)."""
        return _floats(self.shared(mol))


def _floats(values: list[Any]) -> np.ndarray:
    """The values as float64, NaN where one is not a finite number."""
    try:
        raw = np.array(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):  # a value float() refuses: one by one
        raw = np.array([_float(value) for value in values])
    raw[~np.isfinite(raw)] = math.nan
    return raw


def _float(value: Any) -> float:
    """``float(value)``, NaN where it raises."""
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return math.nan


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


#: The molecule features by registry name (``mol_features`` in a featurizer config).
MOL_FEATURES: dict[str, type[MolFeatures]] = {"rdkit2d": RDKit2D, "morgan": MorganCounts}


def build_mol_features(names: Sequence[str]) -> list[MolFeatures]:
    """The feature generators ``names`` (each of :data:`MOL_FEATURES`, at most once), in order.

    Raises:
        ValueError: An unknown, removed (:func:`~graphormer_sepnorm.chem.layout.check_feature_name`)
            or repeated name.
    """
    for name in names:
        check_feature_name(name)
    if len(set(names)) != len(names):
        raise ValueError(f"molecule features repeated: {list(names)}")
    return [MOL_FEATURES[n]() for n in names]
