"""RDKit's descriptors, each intermediate that several of them share computed once a molecule.

``Descriptors.descList`` has one function per descriptor, and several recompute the same thing
(RDKit caches some on the molecule, not these). :class:`SharedDescriptors` gives each named
descriptor RDKit's own value, through RDKit's public functions, with these computed once:

- the E-state indices (``EState.EStateIndices``), of which ``MaxAbsEStateIndex``,
  ``MinAbsEStateIndex``, ``MaxEStateIndex`` and ``MinEStateIndex`` are RDKit's own reductions
  (each of RDKit's functions recomputes them: 0.45 ms a ZINC molecule each);
- the eight ``BCUT2D_*`` values, one ``rdMolDescriptors.BCUT2D`` call (older RDKit releases
  compute it once per value);
- QED (``QED.qed`` with ``qedProperties``): five of its eight properties are descriptors of the
  set (``MolWt``, ``MolLogP``, ``NumHDonors``, ``TPSA``) or one call (strict rotatable bonds),
  and ``QED.properties`` recomputes them on a hydrogen-free copy, Crippen's logP included
  (0.6 of its 1.9 ms). The other three (acceptors, aromatic rings, structural alerts) are
  computed as ``QED.properties`` does, from ``QED``'s own patterns; the 116 alerts go through
  one ``FilterCatalog`` of them (one C++ call instead of 116 Python ones, 0.25 ms less).
  A molecule with hydrogen atoms (which ``QED.properties`` removes first), or one whose reused
  values RDKit could not compute, gets ``QED.qed(mol)`` itself.

Each derivation is checked against RDKit's own function on :data:`PROBES` when first used
(:func:`exact_derivations`): one that differs in the installed RDKit is left to RDKit's own
function, so the values are RDKit's with any release. Everything else is RDKit's own function,
called in the given order on the same molecule, as before.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from rdkit import Chem, rdBase
from rdkit.Chem import QED, Descriptors, FilterCatalog, rdMolDescriptors
from rdkit.Chem.EState import EState

__all__ = ["PROBES", "SharedDescriptors", "exact_derivations"]

#: Molecules every derivation is checked on against RDKit's own function (charges, rings,
#: hydrogens, QED alerts, halogens, a salt, a lone atom).
PROBES = ("CC(=O)Nc1ccc(O)cc1", "C[N+](C)(C)CC(=O)[O-]", "O=[N+]([O-])c1ccc2[nH]c3ccccc3c2c1",
          "CC(C)Cc1ccc(cc1)[C@@H](C)C(=O)O", "O=C(Cl)C=CC(=O)OCC#N", "ClC(Br)(I)F",
          "[Na+].[Cl-]", "C", "[2H]C([2H])([2H])c1ccccc1", "O=S(=O)(O)c1ccc(N=Nc2ccccc2)cc1")

_ESTATE: dict[str, Callable[[Any], float]] = {  # RDKit's own reductions (EState.py)
    "MaxAbsEStateIndex": lambda indices: max(abs(x) for x in indices),
    "MinAbsEStateIndex": lambda indices: min(abs(x) for x in indices),
    "MaxEStateIndex": max,
    "MinEStateIndex": min,
}
_BCUT2D = ("BCUT2D_MWHI", "BCUT2D_MWLOW", "BCUT2D_CHGHI", "BCUT2D_CHGLO", "BCUT2D_LOGPHI",
           "BCUT2D_LOGPLOW", "BCUT2D_MRHI", "BCUT2D_MRLOW")  # rdMolDescriptors.BCUT2D's order
_QED_REUSED = ("MolWt", "MolLogP", "NumHDonors", "TPSA")

Step = Callable[[Chem.Mol, dict[str, Any]], Any]


def _shared(memo: dict[str, Any], key: str, compute: Callable[[], Any]) -> Any:
    """``compute()`` once a molecule (``memo`` is the molecule's); an error is raised each time."""
    if key not in memo:
        try:
            memo[key] = compute()
        except Exception as error:  # RDKit raises assorted types on odd molecules
            memo[key] = error
    if isinstance(memo[key], Exception):
        raise memo[key]
    return memo[key]


def _estate_step(name: str) -> Step:
    reduce = _ESTATE[name]
    return lambda mol, memo: reduce(_shared(memo, "estate", lambda: EState.EStateIndices(mol)))


def _bcut_step(name: str) -> Step:
    index = _BCUT2D.index(name)
    return lambda mol, memo: _shared(memo, "bcut", lambda: rdMolDescriptors.BCUT2D(mol))[index]


@cache
def _alerts() -> FilterCatalog.FilterCatalog:
    """QED's structural alerts as one catalog (an entry matches when its alert does)."""
    catalog = FilterCatalog.FilterCatalog()
    for i, alert in enumerate(QED.StructuralAlerts):
        catalog.AddEntry(FilterCatalog.FilterCatalogEntry(
            str(i), FilterCatalog.SmartsMatcher(str(i), alert, 1)))
    return catalog


def qed_from(mol: Chem.Mol, reused: dict[str, Any]) -> float:
    """``QED.qed(mol)`` from the reused descriptors' values (see the module docstring).

    Args:
        mol: the molecule as parsed (not modified).
        reused: RDKit's ``MolWt``, ``MolLogP``, ``NumHDonors`` and ``TPSA`` of ``mol``
            (a missing or non-finite one: RDKit's own ``QED.qed``).
    """
    values = [reused.get(name, math.nan) for name in _QED_REUSED]
    if (any(atom.GetAtomicNum() == 1 for atom in mol.GetAtoms())
            or not all(isinstance(v, int | float) and math.isfinite(v) for v in values)):
        return QED.qed(mol)
    weight, logp, donors, psa = values
    properties = QED.QEDproperties(
        MW=weight, ALOGP=logp,
        HBA=sum(len(mol.GetSubstructMatches(pattern)) for pattern in QED.Acceptors
                if mol.HasSubstructMatch(pattern)),
        HBD=donors, PSA=psa,
        ROTB=rdMolDescriptors.CalcNumRotatableBonds(
            mol, rdMolDescriptors.NumRotatableBondsOptions.Strict),
        AROM=len(Chem.GetSSSR(Chem.DeleteSubstructs(Chem.Mol(mol), QED.AliphaticRings))),
        ALERTS=len(_alerts().GetMatches(mol)))
    return QED.qed(mol, qedProperties=properties)


def _derived(name: str) -> Step | None:
    """The shared-intermediate step of ``name``, or ``None`` for RDKit's own function."""
    if name in _ESTATE:
        return _estate_step(name)
    if name in _BCUT2D:
        return _bcut_step(name)
    return None


def _same(a: Any, b: Any) -> bool:
    """Equal as RDKit2D stores them: the same float, or both not a finite number."""
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError, OverflowError):
        return False
    return a == b or not (math.isfinite(a) or math.isfinite(b))


def _own(function: Callable[[Chem.Mol], Any], mol: Chem.Mol) -> Any:
    try:
        return function(mol)
    except Exception:  # RDKit raises assorted types on odd molecules
        return math.nan


@cache
def exact_derivations() -> frozenset[str]:
    """The descriptors whose derivation gives RDKit's own value on every :data:`PROBES` molecule.

    Checked once a process with the installed RDKit (about 50 ms), each molecule as parsed and
    with explicit hydrogens.
    """
    functions = dict(Descriptors.descList)
    names = [n for n in (*_ESTATE, *_BCUT2D, "qed") if n in functions]
    exact = set(names)
    with rdBase.BlockLogs():
        for smiles in PROBES:
            parsed = Chem.MolFromSmiles(smiles)
            for mol in (parsed, Chem.AddHs(parsed)):
                reused = {n: _own(functions[n], Chem.Mol(mol)) for n in _QED_REUSED}
                for name in names:
                    step = _derived(name)
                    try:
                        value = (qed_from(Chem.Mol(mol), reused) if step is None
                                 else step(Chem.Mol(mol), {}))
                    except Exception:
                        value = math.nan
                    if not _same(value, _own(functions[name], Chem.Mol(mol))):
                        exact.discard(name)
    return frozenset(exact)


class SharedDescriptors:
    """RDKit's descriptors ``names`` of a molecule, shared intermediates computed once.

    Args:
        names: descriptors of ``Descriptors.descList``, in the order of the values.
        functions: RDKit's own function of each (``mol_features.descriptor_functions``).

    Attributes:
        steps: per descriptor, ``step(mol, memo)`` giving its value (RDKit's own function, or
            its derivation from an intermediate kept in the molecule's ``memo``).
    """

    def __init__(self, names: Sequence[str], functions: Sequence[Callable[[Chem.Mol], Any]]
                 ) -> None:
        exact = exact_derivations()
        self.names = list(names)
        self.steps: list[Step] = [
            (_derived(name) if name in exact and name != "qed" else None)
            or (lambda mol, memo, function=function: function(mol))
            for name, function in zip(self.names, functions, strict=True)]
        self.qed_at = (self.names.index("qed")
                       if "qed" in self.names and "qed" in exact else None)
        self.reused = {name: self.names.index(name) for name in _QED_REUSED
                       if name in self.names}

    def __call__(self, mol: Chem.Mol) -> list[Any]:
        """Each descriptor's value (RDKit's type), ``math.nan`` where RDKit raises."""
        values: list[Any] = [math.nan] * len(self.steps)
        memo: dict[str, Any] = {}
        for k, step in enumerate(self.steps):
            if k != self.qed_at:
                values[k] = _value(step, mol, memo)
        if self.qed_at is not None:  # last: it reuses the others' values
            reused = {name: values[k] for name, k in self.reused.items()}
            values[self.qed_at] = _value(lambda m, _: qed_from(m, reused), mol, memo)
        return values


def _value(step: Step, mol: Chem.Mol, memo: dict[str, Any]) -> Any:
    try:
        return step(mol, memo)
    except Exception:  # RDKit raises assorted types on odd molecules; value unknown
        return math.nan
