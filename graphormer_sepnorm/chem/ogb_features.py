"""OGB's atom and bond features (``ogb.utils.features``), with the vocabulary lookups cached.

OGB turns every RDKit value into a string or an int and searches a list for it: about 0.27 ms of
Python per ZINC-sized molecule, the largest part of featurizing one for the default model. Here
each feature keeps a dict from the RDKit value to OGB's index, filled on first sight by OGB's
own ``safe_index`` on OGB's own lists, so the indices are OGB's by construction.
"""

from __future__ import annotations

from typing import Any

from ogb.utils import features as ogb
from rdkit import Chem

_VOCAB = ogb.allowable_features


class _Index(dict):
    """RDKit value -> its index in one OGB list (the last, ``'misc'``, if absent).

    Args:
        name: The list's key in ``ogb.utils.features.allowable_features``.
        by_name: Look up ``str(value)`` (RDKit enums), as OGB does.
        strict: Raise ``ValueError`` for absent values, as OGB does for lists without ``'misc'``.
    """

    def __init__(self, name: str, by_name: bool = False, strict: bool = False) -> None:
        super().__init__()
        self.vocab, self.by_name, self.strict = _VOCAB[name], by_name, strict

    def __missing__(self, key: Any) -> int:
        value = str(key) if self.by_name else key
        index = self.vocab.index(value) if self.strict else ogb.safe_index(self.vocab, value)
        self[key] = index
        return index


_ATOMIC_NUM = _Index('possible_atomic_num_list')
_CHIRALITY = _Index('possible_chirality_list', by_name=True)
_DEGREE = _Index('possible_degree_list')
_CHARGE = _Index('possible_formal_charge_list')
_NUM_H = _Index('possible_numH_list')
_RADICALS = _Index('possible_number_radical_e_list')
_HYBRIDIZATION = _Index('possible_hybridization_list', by_name=True)
_BOND_TYPE = _Index('possible_bond_type_list', by_name=True)
_BOND_STEREO = _Index('possible_bond_stereo_list', by_name=True, strict=True)


def atom_features(atom: Chem.Atom) -> list[int]:
    """The 9 indices of ``ogb.utils.features.atom_to_feature_vector(atom)``."""
    return [_ATOMIC_NUM[atom.GetAtomicNum()], _CHIRALITY[atom.GetChiralTag()],
            _DEGREE[atom.GetTotalDegree()], _CHARGE[atom.GetFormalCharge()],
            _NUM_H[atom.GetTotalNumHs()], _RADICALS[atom.GetNumRadicalElectrons()],
            _HYBRIDIZATION[atom.GetHybridization()], int(atom.GetIsAromatic()),
            int(atom.IsInRing())]


def bond_features(bond: Chem.Bond) -> list[int]:
    """The 3 indices of ``ogb.utils.features.bond_to_feature_vector(bond)``.

    Raises:
        ValueError: A bond stereo outside OGB's list (OGB raises too).
    """
    return [_BOND_TYPE[bond.GetBondType()], _BOND_STEREO[bond.GetStereo()],
            int(bond.GetIsConjugated())]
