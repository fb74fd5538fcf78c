"""Parts of RDKit descriptors computed once, or as arrays: the same numbers in less time.

:class:`~graphormer_sepnorm.chem.mol_features.RDKit2D` computes 174 RDKit descriptors a
molecule; some recompute what others already did (QED's properties repeat five of them), loop
in Python (the E-state indices over all atom pairs) or run substructure matches that cannot
succeed (QED's alerts, the ``fr_*`` fragment counts: see ``substructure_screen``). These give
RDKit's values, to the last bit (tested against RDKit's own functions), without the repeated,
interpreted or hopeless work; the exceptions are :data:`ROUNDED` (Chi 2-4 from one walk over
the paths, ``path_shortcuts``; BCUT2D's eigenvalues from numpy's solver): equal within rounding.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from rdkit import Chem
from rdkit.Chem import QED, Fragments, MolSurf, rdPartialCharges
from rdkit.Chem.EState import EState_VSA
from rdkit.Chem.EState.EState import GetPrincipleQuantumNumber

from graphormer_sepnorm.chem import crippen_shortcut as crippen
from graphormer_sepnorm.chem import graph_shortcuts as graph
from graphormer_sepnorm.chem.bcut_shortcut import BCUT2D_NAMES, bcut2d
from graphormer_sepnorm.chem.graph_shortcuts import OUTER, mol_tables
from graphormer_sepnorm.chem.path_shortcuts import PATH_SHORTCUTS
from graphormer_sepnorm.chem.path_shortcuts import ROUNDED as PATH_ROUNDED
from graphormer_sepnorm.chem.substructure_screen import PatternScreen

__all__ = ["BCUT2D_NAMES", "CHARGE_DESCRIPTORS", "ESTATE_EXTREMES", "QED_REUSED", "ROUNDED",
           "SHORTCUTS", "VECTOR_FAMILIES", "ChargeDescriptor", "ScreenedFragment", "VectorColumn",
           "bcut2d", "charge_extremes", "descriptor_function", "estate_indices",
           "possible_matches", "qed_from_descriptors"]

#: RDKit's E-state principal quantum number by atomic number.
_SHELL = np.array([GetPrincipleQuantumNumber(z) for z in range(len(OUTER))], dtype=np.int64)

#: The descriptors whose values QED's properties repeat, in ``QEDproperties``' order.
QED_REUSED = ("MolWt", "MolLogP", "NumHDonors", "TPSA", "NumRotatableBonds")


def qed_from_descriptors(mol: Chem.Mol, reused: Sequence[float]) -> float:
    """RDKit's ``QED.qed(mol)``, with the :data:`QED_REUSED` values already computed.

    The same number: RDKit's QED computes these five with the same functions on the molecule
    without explicit hydrogens, which a molecule with none of them is (else, or when one is
    NaN, RDKit's own ``qed`` runs). The rest of QED's properties (acceptors, aromatic rings,
    structural alerts) as RDKit's ``QED.properties`` computes them.
    """
    # every atom heavy: no hydrogen atom (nor a dummy one, which takes RDKit's own path too)
    if any(math.isnan(v) for v in reused) or mol.GetNumHeavyAtoms() != mol.GetNumAtoms():
        return QED.qed(mol)
    weight, logp, donors, psa, rotatable = reused
    possible = possible_matches(mol)  # a pattern that cannot match is not run
    acceptors = zip(QED.Acceptors, possible[_ACCEPTORS], strict=True)
    properties = QED.QEDproperties(
        MW=weight, ALOGP=logp,
        HBA=sum(len(mol.GetSubstructMatches(pattern)) for pattern, may in acceptors
                if may and mol.HasSubstructMatch(pattern)),
        HBD=int(donors), PSA=psa, ROTB=int(rotatable),
        AROM=len(Chem.GetSSSR(Chem.DeleteSubstructs(Chem.Mol(mol), QED.AliphaticRings))),
        ALERTS=sum(1 for alert, may in zip(QED.StructuralAlerts, possible[_ALERTS], strict=True)
                   if may and mol.HasSubstructMatch(alert)))
    return QED.qed(mol, qedProperties=properties)


def _fragment_pattern(function: Callable) -> Chem.Mol | None:
    """The pattern an RDKit ``Fragments.fr_*`` function counts (``None``: not one of those)."""
    if getattr(function, "__code__", None) is not Fragments.fns[0][1].__code__:
        return None
    return function.__defaults__[1]  # lambda mol, countUnique=True, pattern=patt


#: The patterns screened (``possible_matches``): QED's alerts, its acceptors, RDKit's fragments.
SCREENED = [*QED.StructuralAlerts, *QED.Acceptors,
            *(_fragment_pattern(function) for _, function in Fragments.fns)]
#: Where QED's alerts and acceptors sit in :data:`SCREENED`; the fragments follow them.
_ALERTS = slice(0, len(QED.StructuralAlerts))
_ACCEPTORS = slice(_ALERTS.stop, _ALERTS.stop + len(QED.Acceptors))


@functools.cache
def _screen() -> PatternScreen:
    return PatternScreen(SCREENED)


def possible_matches(mol: Chem.Mol) -> np.ndarray:
    """Per pattern of :data:`SCREENED`, whether it may match ``mol`` (cached on ``mol``)."""
    possible = getattr(mol, "_graphormerScreen", None)
    if possible is None:
        possible = mol._graphormerScreen = _screen()(mol).tolist()
    return possible


class ScreenedFragment:
    """An RDKit ``fr_*`` fragment count, 0 without matching where the pattern cannot match.

    Args:
        function: RDKit's function (from ``Descriptors.descList``), run where it may match.
    """

    def __init__(self, function: Callable) -> None:
        if _fragment_pattern(function) is None:
            raise ValueError(f"{function!r} is not an RDKit fragment count")
        self.function = function
        self.column = _ACCEPTORS.stop + next(k for k, (_, f) in enumerate(Fragments.fns)
                                             if f is function)

    def __call__(self, mol: Chem.Mol) -> int:
        """RDKit's count of the fragment in ``mol``."""
        return self.function(mol) if possible_matches(mol)[self.column] else 0

    @staticmethod
    def applies(function: Callable) -> bool:
        """Whether ``function`` is an RDKit fragment count (one of ``Fragments.fns``)."""
        return _fragment_pattern(function) is not None and any(
            f is function for _, f in Fragments.fns)


def estate_indices(mol: Chem.Mol) -> np.ndarray:
    """RDKit's ``EState.EStateIndices(mol)`` ``[N]``, bit for bit, its pair loop as arrays.

    Each atom's intrinsic state ``I_i`` as RDKit computes it (the same operations, element
    by element, from the atom table of ``graph_shortcuts``); then ``I_i + sum_j (I_i - I_j) /
    (d_ij + 1)^2`` over the atoms ``j`` it is connected to, summed in RDKit's order (``j``
    ascending, one after the other: a cumulative sum, not numpy's pairwise one).
    """
    t = mol_tables(mol)
    shell = _SHELL[t.atomic]
    with np.errstate(divide="ignore", invalid="ignore"):  # atoms without neighbours: 0
        intrinsic = np.where(t.degree > 0, (4. / (shell * shell) * (OUTER[t.atomic] - t.hydrogens)
                                            + 1) / t.degree, 0.0)
    if not len(intrinsic):
        return intrinsic
    dists = Chem.GetDistanceMatrix(mol, useBO=False, useAtomWts=False) + 1
    terms = (intrinsic[:, None] - intrinsic[None, :]) / (dists * dists)
    terms[dists >= 1e6] = 0.0  # other fragments (RDKit skips them; adding 0.0 changes nothing)
    return np.cumsum(terms, axis=1)[:, -1] + intrinsic


#: RDKit's descriptor families that are entries of one vector, by name: RDKit's ``PEOE_VSA3`` is
#: ``MolSurf.PEOE_VSA_(mol, force=False)[2]`` (``_InstallDescriptors`` of ``MolSurf``,
#: ``EState_VSA``).
VECTOR_FAMILIES: dict[str, Callable] = {
    name: functools.partial(function, force=False) for name, function in (
        ("PEOE_VSA", MolSurf.PEOE_VSA_), ("SMR_VSA", MolSurf.SMR_VSA_),
        ("SlogP_VSA", MolSurf.SlogP_VSA_), ("EState_VSA", EState_VSA.EState_VSA_),
        ("VSA_EState", EState_VSA.VSA_EState_))}
_VECTOR_NAME = re.compile(rf"^({'|'.join(VECTOR_FAMILIES)})([1-9][0-9]*)$")

#: Descriptors whose shortcut gives RDKit's value within rounding, not to the last bit: the same
#: terms in another order (Chi 2-4), the same matrices through another eigensolver (BCUT2D).
ROUNDED = PATH_ROUNDED | frozenset(BCUT2D_NAMES)


class VectorColumn:
    """RDKit's descriptor ``name``, an entry of a vector of descriptors computed once a molecule.

    The vectors: the :data:`VECTOR_FAMILIES` and :data:`BCUT2D_NAMES` (:func:`bcut2d`). RDKit's
    ``PEOE_VSA1`` .. ``PEOE_VSA14`` each recompute the Gasteiger charges and the whole vector
    (6.5 us a call) to keep one entry; here the first column computed caches the vector on the
    molecule (as RDKit caches the other families' and BCUT2D's) and the others read it.

    Args:
        name: RDKit's name of the descriptor, e.g. ``PEOE_VSA3``.
    """

    def __init__(self, name: str) -> None:
        if name in BCUT2D_NAMES:  # RDKit caches its vector (VectorDescriptorWrapper); as here
            self.family, self.index = bcut2d, BCUT2D_NAMES.index(name)
            self.attribute = "_graphormerBCUT2D"
            return
        match = _VECTOR_NAME.match(name)
        if match is None:
            raise ValueError(f"{name!r} is not an entry of {sorted(VECTOR_FAMILIES)}")
        self.family = VECTOR_FAMILIES[match.group(1)]
        self.index = int(match.group(2)) - 1
        self.attribute = f"_graphormer{match.group(1)}"

    def __call__(self, mol: Chem.Mol) -> float:
        """RDKit's value of the descriptor for ``mol``."""
        vector = getattr(mol, self.attribute, None)
        if vector is None:  # where the family raises, each column raises, as RDKit's do
            vector = self.family(mol)
            setattr(mol, self.attribute, vector)
        return vector[self.index]

    @staticmethod
    def applies(name: str) -> bool:
        """Whether ``name`` is an entry of a :data:`VECTOR_FAMILIES` family or BCUT2D's."""
        return _VECTOR_NAME.match(name) is not None or name in BCUT2D_NAMES


#: RDKit's descriptors over the extremes of the Gasteiger charges (``Descriptors``).
CHARGE_DESCRIPTORS = frozenset({"MaxPartialCharge", "MinPartialCharge", "MaxAbsPartialCharge",
                                "MinAbsPartialCharge"})


def charge_extremes(mol: Chem.Mol) -> tuple[float, float]:
    """``Descriptors._ChargeDescriptors(mol, force=True)``, each charge read as a double.

    RDKit reads each atom's charge as text (``float(GetProp(...))``: 17 digits, the same
    double), a third of the time; the same ``min``/``max`` from the same start, in atom order
    (NaN charges take Python's semantics as in RDKit's loop).
    """
    rdPartialCharges.ComputeGasteigerCharges(mol)
    low, high = 500., -500.
    for charge in [atom.GetDoubleProp("_GasteigerCharge")
                   for atom in map(mol.GetAtomWithIdx, range(mol.GetNumAtoms()))]:
        low, high = min(charge, low), max(charge, high)
    return low, high


class ChargeDescriptor:
    """RDKit's function of :data:`CHARGE_DESCRIPTORS`, the extremes cached as RDKit caches them.

    Args:
        function: RDKit's function (from ``Descriptors.descList``).
    """

    def __init__(self, function: Callable) -> None:
        self.function = function

    def __call__(self, mol: Chem.Mol) -> float:
        """RDKit's value for ``mol`` (its ``_chargeDescriptors``, from :func:`charge_extremes`)."""
        if not hasattr(mol, "_chargeDescriptors"):  # as Descriptors._ChargeDescriptors caches
            mol._chargeDescriptors = charge_extremes(mol)
        return self.function(mol)


#: Descriptors over a molecule's E-state indices that take RDKit's ``force`` (recompute) flag.
ESTATE_EXTREMES = frozenset({"MaxEStateIndex", "MinEStateIndex", "MaxAbsEStateIndex",
                             "MinAbsEStateIndex"})


#: Descriptors computed by a shortcut giving RDKit's value to the last bit (:data:`ROUNDED`:
#: within rounding): RDKit's Python loops over atoms and bonds, from one pass over them a
#: molecule (``graph_shortcuts``); Crippen's logP and MR without typing an explicit-hydrogen
#: copy (``crippen_shortcut``); the descriptors over paths of 2-4 bonds from one walk over them
#: (``path_shortcuts``).
SHORTCUTS: dict[str, Any] = {
    "SPS": graph.spacial_score, "BertzCT": graph.bertz_ct, "BalabanJ": graph.balaban_j,
    "AvgIpc": graph.avg_ipc,
    "Chi0": graph.chi0, "Chi1": graph.chi1, "NumValenceElectrons": graph.num_valence_electrons,
    "MolLogP": crippen.mol_logp, "MolMR": crippen.mol_mr, **PATH_SHORTCUTS}


def descriptor_function(name: str, function: Any) -> Any:
    """What ``mol_features.RDKit2D`` calls for RDKit's descriptor ``name`` (RDKit's ``function``).

    The E-state extremes without recomputing the indices, a shortcut of :data:`SHORTCUTS`, an
    entry of a VSA family's vector computed once
    (:class:`VectorColumn`), a fragment count screened (:class:`ScreenedFragment`), else
    RDKit's own.
    """
    if name in ESTATE_EXTREMES:
        return functools.partial(function, force=0)
    if name in SHORTCUTS:
        return SHORTCUTS[name]
    if VectorColumn.applies(name):
        return VectorColumn(name)
    if name in CHARGE_DESCRIPTORS:
        return ChargeDescriptor(function)
    return ScreenedFragment(function) if ScreenedFragment.applies(function) else function
