"""Chi 2-4, Kappa 2-3 and Phi from one walk over the paths: RDKit's paths, RDKit's values."""

import math

import numpy as np
import pytest
from rdkit import Chem, RDLogger
from rdkit.Chem import Descriptors, rdMolDescriptors
from test_rdkit_shortcuts import SMILES

from graphormer_sepnorm.chem import mol_features as mf
from graphormer_sepnorm.chem import path_shortcuts as paths

RDLogger.DisableLog("rdApp.*")

# small rings (RDKit's paths include a ring of L bonds and, at 4 bonds, a triangle after a bond),
# fused, bridged and spiro rings, cubane-like cages, dummy atoms, dative bonds
RINGS = ["C1CC1", "C1CCC1", "C12CC1C2", "C12C3C1C23", "CC1CC1", "C1CC12CC2", "C1CC2CC1C2",
         "C12C3C4C1C5C2C3C45", "*C1CC1*", "*", "[Cu]<-N", "C1=CC=CC=CC=C1", "[Si]1CC1Cl"]


@pytest.mark.parametrize("smiles, counts", [
    ("CCCC", (2, 1, 0)),      # a chain of 3 bonds
    ("C1CC1", (3, 1, 0)),     # the ring is the one path of 3 bonds
    ("C1CCC1", (4, 4, 1)),    # ... and of 4
    ("CC1CC1", (5, 3, 1)),    # the triangle after the methyl bond: a path of 4 bonds
    ("C12CC1C2", (8, 8, 5)),  # 4 of its 5 bonds, any 4: one 4-ring and four such triangles
    ("C", (0, 0, 0)), ("CC.CC", (0, 0, 0))])
def test_path_counts_by_hand(smiles, counts):
    mol = Chem.MolFromSmiles(smiles)
    assert paths.path_sums(mol).counts == counts
    assert counts == tuple(len(Chem.FindAllPathsOfLengthN(mol, n)) for n in (2, 3, 4))


def test_chi_terms_by_hand():
    # cyclopropane: each CH2 has nVal 4 - 2 = 2; the ring's three atoms once each
    ring = paths.path_sums(Chem.MolFromSmiles("C1CC1"))
    assert ring.chi[1, 0] == pytest.approx(2 ** -1.5, rel=1e-15)
    assert ring.chi[2].tolist() == [0.0, 0.0]
    # methylcyclopropane: CH3 1, CH 1/sqrt(3), CH2 1/sqrt(2); the junction CH counts twice
    lasso = paths.path_sums(Chem.MolFromSmiles("CC1CC1"))
    assert lasso.chi[2, 1] == pytest.approx(1 / 3 * 1 / 2, rel=1e-15)
    # sulfur: Hall-Kier delta (6 - 0) / (16 - 6 - 1); nVal 6 - 0
    weights = paths.atom_weights(paths.mol_tables(Chem.MolFromSmiles("CSC")))
    np.testing.assert_allclose(weights[1], [6 ** -0.5, (6 / 9) ** -0.5], rtol=1e-15)


@pytest.mark.parametrize("smiles", [*SMILES, *RINGS])
def test_path_descriptors_are_rdkits(smiles):
    # Kappa2, Kappa3 and Phi to the last bit (RDKit's counts and formulas); Chi within rounding
    functions = dict(Descriptors.descList)
    for mol in (Chem.MolFromSmiles(smiles), Chem.AddHs(Chem.MolFromSmiles(smiles))):
        for name, ours in paths.PATH_SHORTCUTS.items():
            expected, got = functions[name](Chem.Mol(mol)), ours(Chem.Mol(mol))
            if name in paths.ROUNDED:
                assert math.isclose(got, expected, rel_tol=1e-13), (smiles, name, got, expected)
            else:
                assert np.float64(got).tobytes() == np.float64(expected).tobytes(), (smiles, name)


def test_hydrogen_atoms_take_rdkits_own(monkeypatch):
    with_h = Chem.AddHs(Chem.MolFromSmiles("CC1CC1O"))
    assert paths.path_sums(with_h) is None
    # RDKit's own value, to the last bit (its paths leave the hydrogen atoms out)
    assert paths.PATH_SHORTCUTS["Chi3v"](with_h) == rdMolDescriptors.CalcChiNv(with_h, 3)
    monkeypatch.setattr(rdMolDescriptors, "CalcKappa2", lambda mol: -2.0)
    monkeypatch.setattr(rdMolDescriptors, "CalcKappa3", lambda mol: -3.0)
    monkeypatch.setattr(rdMolDescriptors, "CalcPhi", lambda mol: -4.0)
    assert (paths.kappa2(with_h), paths.kappa3(with_h), paths.phi(with_h)) == (-2.0, -3.0, -4.0)


def test_walk_is_cached_and_rdkit2d_uses_it():
    mol = Chem.MolFromSmiles("CC1CC1O")
    first = paths.path_sums(mol)
    assert paths.path_sums(mol) is first
    features = mf.RDKit2D()
    names = [item["name"] for item in features.spec]
    for name, function in paths.PATH_SHORTCUTS.items():
        assert features.functions[names.index(name)] is function
