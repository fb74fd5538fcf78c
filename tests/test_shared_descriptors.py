"""Shared intermediates give RDKit's own descriptor values, to the last bit."""

import math

import pytest
from rdkit import Chem
from rdkit.Chem import QED, Descriptors

from graphormer_sepnorm.chem import shared_descriptors as sd
from graphormer_sepnorm.chem.mol_features import RDKit2D

DERIVED = {"MaxAbsEStateIndex", "MinAbsEStateIndex", "MaxEStateIndex", "MinEStateIndex", "qed",
           "BCUT2D_MWHI", "BCUT2D_MWLOW", "BCUT2D_CHGHI", "BCUT2D_CHGLO", "BCUT2D_LOGPHI",
           "BCUT2D_LOGPLOW", "BCUT2D_MRHI", "BCUT2D_MRLOW"}
MOLECULES = ["CC(=O)Nc1ccc(O)cc1", "O=C1NC(=O)C(=O)N1c1ccccc1", "CC(=O)OC(C)=O",
             "N#Cc1ccc(C=CC(=O)Cl)cc1", "[O-][N+](=O)c1ccccc1CBr", "C1CC2CCC1CC2",
             "[Na+].[Cl-]", "[He]", "[2H]C([2H])([2H])c1ccccc1"]


def test_every_derivation_is_exact_with_the_installed_rdkit():
    assert sd.exact_derivations() == frozenset(DERIVED)


@pytest.mark.parametrize("smiles", MOLECULES)
def test_qed_from_the_reused_values_is_rdkits_qed(smiles):
    functions = dict(Descriptors.descList)
    for mol in (Chem.MolFromSmiles(smiles), Chem.AddHs(Chem.MolFromSmiles(smiles))):
        reused = {name: functions[name](mol) for name in ("MolWt", "MolLogP", "NumHDonors",
                                                          "TPSA")}
        assert sd.qed_from(Chem.Mol(mol), reused) == QED.qed(Chem.Mol(mol))


def test_qed_without_a_reused_value_is_rdkits_own(monkeypatch):
    mol = Chem.MolFromSmiles("CC(=O)Nc1ccc(O)cc1")
    calls = []
    monkeypatch.setattr(sd.QED, "qed", lambda m, **kw: calls.append(kw) or 0.5)
    assert sd.qed_from(mol, {"MolWt": 151.2, "MolLogP": math.nan}) == 0.5
    assert calls == [{}]  # no properties given: RDKit's QED.properties computes them all


def test_a_derivation_that_differs_is_left_to_rdkits_function(monkeypatch):
    sd.exact_derivations.cache_clear()
    monkeypatch.setitem(sd._ESTATE, "MinEStateIndex", lambda indices: max(indices))
    try:
        exact = sd.exact_derivations()
        features = RDKit2D()
    finally:
        sd.exact_derivations.cache_clear()
    assert exact == frozenset(DERIVED - {"MinEStateIndex"})
    mol = Chem.MolFromSmiles("CC(=O)Nc1ccc(O)cc1")
    at = features.names.index("MinEStateIndex")
    assert features.raw(mol)[at] == Descriptors.MinEStateIndex(mol)


def test_an_intermediate_that_raises_gives_nan_to_each_of_its_descriptors(monkeypatch):
    def broken(mol):
        raise RuntimeError("no indices")

    features = RDKit2D()
    monkeypatch.setattr(sd.EState, "EStateIndices", broken)
    raw = features.raw(Chem.MolFromSmiles("CCO"))
    estate = [k for k, name in enumerate(features.names) if name.endswith("EStateIndex")]
    assert len(estate) == 3 and all(math.isnan(raw[k]) for k in estate)
    assert math.isfinite(raw[features.names.index("MolWt")])
