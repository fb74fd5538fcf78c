"""Parts of RDKit descriptors computed once, or as arrays: the same numbers in less time.

:class:`~graphormer_sepnorm.chem.mol_features.RDKit2D` computes 174 RDKit descriptors a
molecule; some recompute what others already did (QED's properties repeat five of them) or
loop in Python (the E-state indices over all atom pairs). These give RDKit's values, to the
last bit (tested against RDKit's own functions), without the repeated or interpreted work.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from rdkit import Chem
from rdkit.Chem import QED
from rdkit.Chem.EState.EState import GetPrincipleQuantumNumber

__all__ = ["QED_REUSED", "estate_indices", "qed_from_descriptors"]

#: The descriptors whose values QED's properties repeat, in ``QEDproperties``' order.
QED_REUSED = ("MolWt", "MolLogP", "NumHDonors", "TPSA", "NumRotatableBonds")


def qed_from_descriptors(mol: Chem.Mol, reused: Sequence[float]) -> float:
    """RDKit's ``QED.qed(mol)``, with the :data:`QED_REUSED` values already computed.

    The same number: RDKit's QED computes these five with the same functions on the molecule
    without explicit hydrogens, which a molecule with none of them is (else, or when one is
    NaN, RDKit's own ``qed`` runs). The rest of QED's properties (acceptors, aromatic rings,
    structural alerts) as RDKit's ``QED.properties`` computes them.
    """
    if any(math.isnan(v) for v in reused) or any(a.GetAtomicNum() == 1 for a in mol.GetAtoms()):
        return QED.qed(mol)
    weight, logp, donors, psa, rotatable = reused
    properties = QED.QEDproperties(
        MW=weight, ALOGP=logp,
        HBA=sum(len(mol.GetSubstructMatches(pattern)) for pattern in QED.Acceptors
                if mol.HasSubstructMatch(pattern)),
        HBD=int(donors), PSA=psa, ROTB=int(rotatable),
        AROM=len(Chem.GetSSSR(Chem.DeleteSubstructs(Chem.Mol(mol), QED.AliphaticRings))),
        ALERTS=sum(1 for alert in QED.StructuralAlerts if mol.HasSubstructMatch(alert)))
    return QED.qed(mol, qedProperties=properties)


def estate_indices(mol: Chem.Mol) -> np.ndarray:
    """RDKit's ``EState.EStateIndices(mol)`` ``[N]``, bit for bit, its pair loop as arrays.

    Each atom's intrinsic state ``I_i`` as RDKit computes it; then ``I_i + sum_j (I_i - I_j) /
    (d_ij + 1)^2`` over the atoms ``j`` it is connected to, summed in RDKit's order (``j``
    ascending, one after the other: a cumulative sum, not numpy's pairwise one).
    """
    table = Chem.GetPeriodicTable()
    intrinsic = np.zeros(mol.GetNumAtoms(), dtype=np.float64)
    for i, atom in enumerate(mol.GetAtoms()):
        degree = atom.GetDegree()
        if degree > 0:
            number = atom.GetAtomicNum()
            valence = table.GetNOuterElecs(number) - atom.GetTotalNumHs()
            shell = GetPrincipleQuantumNumber(number)
            intrinsic[i] = (4. / (shell * shell) * valence + 1) / degree
    if not len(intrinsic):
        return intrinsic
    dists = Chem.GetDistanceMatrix(mol, useBO=False, useAtomWts=False) + 1
    terms = (intrinsic[:, None] - intrinsic[None, :]) / (dists * dists)
    terms[dists >= 1e6] = 0.0  # other fragments (RDKit skips them; adding 0.0 changes nothing)
    return np.cumsum(terms, axis=1)[:, -1] + intrinsic
