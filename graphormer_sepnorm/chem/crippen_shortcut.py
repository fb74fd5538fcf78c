"""RDKit's Crippen logP and MR (``MolLogP``, ``MolMR``) without typing an explicit-H copy.

RDKit's ``CalcCrippenDescriptors(mol)`` adds the hydrogens as atoms, types every atom of that
copy against Wildman and Crippen's ~110 patterns and sums the contributions in atom order: the
heavy atoms, then the added hydrogens, each heavy atom's in turn. A heavy atom's type does not
change when its hydrogens become atoms (the patterns count them either way: checked on 15,600
molecules, every contribution the same), and the molecule's own contributions are cached by
``SMR_VSA``/``SlogP_VSA``/``BCUT2D``. A hydrogen's type follows from the atom it is bonded to
(and, on an oxygen, that oxygen's other neighbour): :func:`hydrogen_type` decides the cases it
can decide and leaves the rest (hydrogen atoms already present, charged or aromatic oxygens, an
oxygen on an aromatic atom other than carbon, ...) to RDKit. The two sums are RDKit's, in its
order, so the values are RDKit's to the last bit (tested against RDKit's own functions).
"""

from __future__ import annotations

import functools

from rdkit import Chem
from rdkit.Chem import rdMolDescriptors

from graphormer_sepnorm.chem.graph_shortcuts import mol_tables

__all__ = ["crippen_descriptors", "hydrogen_type", "mol_logp", "mol_mr"]

_SINGLE, _DOUBLE = Chem.BondType.SINGLE, Chem.BondType.DOUBLE
#: The type of a hydrogen on any atom of these elements: [#1][#6,#1], then [#1][#7].
_ON_ELEMENT = {6: "H1", 7: "H3"}
#: Molecules (and the atom) whose hydrogens RDKit types as H1, H2, H3, H4 and HS (its labels),
#: to read their contributions from RDKit itself rather than copy its table.
_REFERENCES = {"H1": ("C", 0), "H2": ("CO", 1), "H3": ("N", 0), "H4": ("OC=O", 0),
               "HS": ("OC#N", 0)}


@functools.cache
def _hydrogen_contributions() -> dict[str, tuple[float, float]] | None:
    """RDKit's (logP, MR) contribution of each hydrogen type, or ``None``.

    ``None`` where this RDKit types the reference hydrogens otherwise: its typing changed, and
    every molecule then takes RDKit's own path.
    """
    found = {}
    for label, (smiles, atom) in _REFERENCES.items():
        mol = Chem.AddHs(Chem.MolFromSmiles(smiles))
        types, labels = [0] * mol.GetNumAtoms(), [""] * mol.GetNumAtoms()
        contributions = rdMolDescriptors._CalcCrippenContribs(mol, True, types, labels)
        hydrogen = next(n.GetIdx() for n in mol.GetAtomWithIdx(atom).GetNeighbors()
                        if n.GetAtomicNum() == 1)
        if labels[hydrogen] != label:
            return None
        found[label] = contributions[hydrogen]
    return found


def _oxygen_hydrogen_type(oxygen: Chem.Atom) -> str | None:
    """The type of the hydrogen on a neutral aliphatic hydroxyl oxygen, or ``None``."""
    if oxygen.GetIsAromatic() or oxygen.GetFormalCharge() or oxygen.GetTotalNumHs() != 1:
        return None
    bonds = list(oxygen.GetBonds())
    if len(bonds) != 1 or bonds[0].GetBondType() != _SINGLE:
        return None
    other = bonds[0].GetOtherAtom(oxygen)
    number = other.GetAtomicNum()
    if number == 6 and (other.GetIsAromatic() or other.GetTotalDegree() == 4):
        return "H2"  # [#1]O[CX4,c]
    if number not in (6, 7, 8, 16):
        return "H2"  # [#1]O[!C;!N;!O;!S]
    if other.GetIsAromatic():
        return None  # an aromatic N, O, S: which of the patterns applies is left to RDKit
    if number == 7:
        return "H3"  # [#1]O[#7]
    if number in (8, 16):
        return "H4"  # [#1]O[O,S]
    for bond in other.GetBonds():  # [#1]OC=[#6,#7,O,S]
        far = bond.GetOtherAtom(other)
        if bond.GetBondType() == _DOUBLE and far.GetIdx() != oxygen.GetIdx():
            if far.GetIsAromatic() and far.GetAtomicNum() in (8, 16):
                return None
            if far.GetAtomicNum() in (6, 7, 8, 16):
                return "H4"
    return "HS"


def hydrogen_type(atom: Chem.Atom) -> str | None:
    """RDKit's Crippen type of a hydrogen on ``atom`` (``H1`` .. ``HS``), or ``None``: RDKit's."""
    number = atom.GetAtomicNum()
    if number in _ON_ELEMENT:
        return _ON_ELEMENT[number]
    if number == 8:
        return _oxygen_hydrogen_type(atom)
    if number in (1, 0) or atom.GetIsAromatic():
        return None
    return "H2"  # [#1][!C;!N;!O]


def _hydrogen_labels(mol: Chem.Mol) -> list[str] | None:
    """The types of the hydrogens RDKit's ``AddHs`` would add, in its order; ``None``: RDKit's."""
    t = mol_tables(mol)
    if (t.atomic == 1).any():  # hydrogen atoms already: RDKit's
        return None
    labels: list[str] = []
    for index, (number, count) in enumerate(zip(t.atomic.tolist(), t.hydrogens.tolist(),
                                                strict=True)):
        if count:  # on C and N (most hydrogens) without reading the atom again
            label = _ON_ELEMENT.get(number) or hydrogen_type(mol.GetAtomWithIdx(index))
            if label is None:
                return None
            labels += [label] * count
    return labels


def crippen_descriptors(mol: Chem.Mol) -> tuple[float, float]:
    """``rdMolDescriptors.CalcCrippenDescriptors(mol)``: (logP, MR), RDKit's to the last bit.

    Cached on ``mol`` (``_graphormerCrippen``) for ``MolLogP`` and ``MolMR`` to share.
    """
    cached = getattr(mol, "_graphormerCrippen", None)
    if cached is None:
        labels, table = _hydrogen_labels(mol), _hydrogen_contributions()
        if labels is None or table is None:
            cached = tuple(rdMolDescriptors.CalcCrippenDescriptors(mol))
        else:
            logp = mr = 0.0  # RDKit's sums: heavy atoms, then hydrogens, one after the other
            for a, b in [*rdMolDescriptors._CalcCrippenContribs(mol), *map(table.get, labels)]:
                logp += a
                mr += b
            cached = (logp, mr)
        mol._graphormerCrippen = cached
    return cached


def mol_logp(mol: Chem.Mol) -> float:
    """``Crippen.MolLogP(mol)`` (:func:`crippen_descriptors`)."""
    return crippen_descriptors(mol)[0]


def mol_mr(mol: Chem.Mol) -> float:
    """``Crippen.MolMR(mol)`` (:func:`crippen_descriptors`)."""
    return crippen_descriptors(mol)[1]
