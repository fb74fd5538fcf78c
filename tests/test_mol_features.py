"""Molecule features: the descriptor transforms, Morgan counts, and the featurizer carrying them."""

import math

import numpy as np
import pytest
import torch
from rdkit import Chem
from rdkit.Chem import QED, Descriptors
from rdkit.Chem.EState.EState import EStateIndices
from rdkit_values import assert_rdkits

from graphormer_sepnorm.chem import mol_features as mf
from graphormer_sepnorm.chem.featurizers import (
    OgbFeaturizer,
    build_featurizer,
    featurizer_from_config,
)
from graphormer_sepnorm.data import GraphormerCollator


def test_transform_descriptors_by_hand():
    spec = [{"name": "a", "transform": "identity", "clip": [-1.0, 5.0], "mean": 1.0, "std": 2.0},
            {"name": "b", "transform": "log1p", "clip": [0.0, 10.0], "mean": 0.0, "std": 1.0},
            {"name": "c", "transform": "signed_log1p", "clip": [-9.0, 9.0], "mean": 0.0,
             "std": 0.5}]
    raw = np.array([[3.0, math.e - 1, -(math.e ** 2 - 1)],
                    [9.0, -4.0, math.nan]])  # 9 clipped to 5; log1p of a negative count is 0
    out = mf.transform_descriptors(raw, spec)
    np.testing.assert_allclose(out[0], [1.0, 1.0, -4.0], atol=1e-12)
    np.testing.assert_allclose(out[1, :2], [2.0, 0.0], atol=1e-12)
    assert math.isnan(out[1, 2])
    with pytest.raises(ValueError, match="unknown transform .cube."):
        mf.transform_descriptors(raw[:, :1], [dict(spec[0], transform="cube")])


def test_grouped_transform_equals_one_descriptor_at_a_time():
    spec = mf.descriptor_spec()
    raw = np.random.default_rng(0).normal(0, 50, size=(7, len(spec)))
    raw[3, 5] = math.nan
    expected = np.stack([(np.clip(mf.apply_transform(raw[:, k], item["transform"]), *item["clip"])
                          - item["mean"]) / item["std"] for k, item in enumerate(spec)], -1)
    transform = mf.DescriptorTransform(spec)
    np.testing.assert_array_equal(transform(raw), expected)
    np.testing.assert_array_equal(transform(raw[2]), expected[2])  # one molecule, [D]
    assert math.isnan(transform(raw)[3, 5])
    with pytest.raises(ValueError, match="3 descriptor columns"):
        transform(raw[:, :3])


def test_rdkit2d_applies_the_recorded_spec():
    spec = mf.descriptor_spec()
    assert len(spec) == 174 and spec[0]["name"] == "MaxAbsEStateIndex"
    mol = Chem.MolFromSmiles("CC(=O)Nc1ccc(O)cc1")
    values = mf.RDKit2D()(mol)
    k = [item["name"] for item in spec].index("MolWt")
    item = spec[k]
    raw = Descriptors.MolWt(mol)  # 151.165
    x = np.log1p(raw) if item["transform"] == "log1p" else raw
    expected = (np.clip(x, *item["clip"]) - item["mean"]) / item["std"]
    assert values[k] == pytest.approx(expected, rel=1e-6)
    assert values.dtype == np.float32 and np.isfinite(values).all()


@pytest.mark.parametrize("smiles",
                         ["CC(=O)Nc1ccc(O)cc1", "O=C(O)c1ccccc1Cl", "C[N+](C)(C)CC(=O)[O-]"])
def test_rdkit2d_raw_values_are_rdkits_own(smiles):
    # E-state indices are computed once a molecule (force=0): the values RDKit gives one by one
    features, functions = mf.RDKit2D(), dict(Descriptors.descList)
    names = [item["name"] for item in features.spec]
    ours = [mf._safe(f, Chem.MolFromSmiles(smiles)) for f in features.functions]
    plain = [mf._safe(functions[name], Chem.MolFromSmiles(smiles)) for name in names]
    assert_rdkits(ours, plain, names)  # to the last bit, the Chi sums of paths within 1e-13
    shared = Chem.MolFromSmiles(smiles)  # all on one molecule, as RDKit2D calls them
    assert_rdkits([mf._safe(f, shared) for f in features.functions], plain, names)


ODD_MOLECULES = ["CC(=O)Nc1ccc(O)cc1", "C[N+](C)(C)CC(=O)[O-]", "[2H]C([2H])([2H])c1ccccc1",
                 "O=[N+]([O-])c1ccc2[nH]c3ccccc3c2c1", "C1CC2CCC1CC2", "N#CC(=O)Cl", "[Na+].[Cl-]",
                 "OC1=C(O)C=C2C(=C1)OC3=CC(=O)C(=CC3=C2C4=CC=CC=C4)O"]


@pytest.mark.parametrize("smiles", ODD_MOLECULES)
def test_rdkit2d_is_rdkits_functions_one_by_one(smiles):
    # QED takes five descriptors RDKit2D already computed: still RDKit's qed, to the last bit
    features, functions = mf.RDKit2D(), dict(Descriptors.descList)
    for mol in (Chem.MolFromSmiles(smiles), Chem.AddHs(Chem.MolFromSmiles(smiles))):
        plain = np.array([mf._safe(functions[item["name"]], Chem.Mol(mol))
                          for item in features.spec])
        expected = np.nan_to_num(features.transform(plain), nan=0.0).astype(np.float32)
        np.testing.assert_array_equal(features(mol), expected)


@pytest.mark.parametrize("smiles", ODD_MOLECULES)
def test_qed_from_descriptors_is_rdkits_qed(smiles):
    mol = Chem.MolFromSmiles(smiles)
    reused = [Descriptors.MolWt(mol), Descriptors.MolLogP(mol), Descriptors.NumHDonors(mol),
              Descriptors.TPSA(mol), Descriptors.NumRotatableBonds(mol)]
    assert mf.qed_from_descriptors(mol, reused) == QED.qed(mol)
    with_h = Chem.AddHs(mol)  # explicit hydrogens: RDKit's own qed runs (same value)
    assert mf.qed_from_descriptors(with_h, [math.nan] * 5) == QED.qed(with_h)


@pytest.mark.parametrize("smiles", [*ODD_MOLECULES, "CCO.CC", "[Na+]"])
def test_estate_indices_are_rdkits_bit_for_bit(smiles):
    from graphormer_sepnorm.chem.rdkit_shortcuts import estate_indices

    for mol in (Chem.MolFromSmiles(smiles), Chem.AddHs(Chem.MolFromSmiles(smiles))):
        assert estate_indices(mol).tolist() == EStateIndices(Chem.Mol(mol)).tolist()
    assert estate_indices(Chem.Mol()).shape == (0,)


def test_rdkit2d_failing_descriptor_is_the_mean(monkeypatch):
    features = mf.RDKit2D()

    def broken(mol):
        raise RuntimeError("no value")

    features.functions[0] = broken
    assert features(Chem.MolFromSmiles("CCO"))[0] == 0.0


def test_rdkit2d_without_the_array_estate_indices_gives_rdkits(monkeypatch):
    # if the array E-state indices raise, RDKit's own run inside each descriptor's _safe
    expected = mf.RDKit2D()(Chem.MolFromSmiles("CC(=O)Nc1ccc(O)cc1"))

    def broken(mol):
        raise ValueError("no E-state")

    monkeypatch.setattr(mf, "estate_indices", broken)
    mol = Chem.MolFromSmiles("CC(=O)Nc1ccc(O)cc1")
    np.testing.assert_array_equal(mf.RDKit2D()(mol), expected)
    assert list(mol._eStateIndices) == list(EStateIndices(Chem.MolFromSmiles(
        "CC(=O)Nc1ccc(O)cc1")))  # computed and cached by RDKit's force=0 call


def test_morgan_counts_of_ethane():
    # two identical CH3 atoms (count 2); at radius 1 both cover the same bond, which RDKit
    # counts once (a redundant environment)
    values = mf.MorganCounts()(Chem.MolFromSmiles("CC"))
    assert values.shape == (2048,)
    np.testing.assert_allclose(np.sort(values[values > 0]), [math.log(2), math.log(3)],
                               rtol=1e-6)


def test_build_mol_features_checks_names():
    assert [f.dim for f in mf.build_mol_features(["morgan", "rdkit2d"])] == [2048, 174]
    with pytest.raises(ValueError, match="unknown molecule features"):
        mf.build_mol_features(["maccs"])
    with pytest.raises(ValueError, match="repeated"):
        mf.build_mol_features(["morgan", "morgan"])


def test_featurizer_carries_the_features_and_its_config_rebuilds_them():
    featurizer = OgbFeaturizer(mol_features=["rdkit2d", "morgan"])
    assert featurizer.mol_feature_dim == 2222
    data = featurizer("c1ccccc1O")
    mol = Chem.MolFromSmiles("c1ccccc1O")
    expected = np.concatenate([mf.RDKit2D()(mol), mf.MorganCounts()(mol)])
    np.testing.assert_array_equal(data.mol_x.numpy(), expected[None])
    again = featurizer_from_config(featurizer.to_config())
    assert again.mol_features == ["rdkit2d", "morgan"]
    np.testing.assert_array_equal(again.arrays("c1ccccc1O").mol_x, expected)
    # without molecule features the config is that of older checkpoints
    assert "mol_features" not in OgbFeaturizer().to_config()
    assert getattr(OgbFeaturizer()("CCO"), "mol_x", None) is None
    zinc = build_featurizer("zinc", mol_features=["morgan"])
    assert zinc("CCO").mol_x.shape == (1, 2048)


def test_collator_stacks_features_and_refuses_a_mixed_batch():
    with_features = OgbFeaturizer(mol_features=["morgan"])
    graphs = [with_features(s) for s in ("CCO", "CC")]
    batch = GraphormerCollator(5)(graphs)
    assert batch.mol_x.shape == (2, 2048) and batch.mol_x.dtype == torch.float32
    torch.testing.assert_close(batch.mol_x[1], graphs[1].mol_x[0])
    with pytest.raises(ValueError, match="some graphs of the batch have molecule features"):
        GraphormerCollator(5)([graphs[0], OgbFeaturizer()("CC")])


def test_layout_without_rdkit_matches_the_generators():
    from graphormer_sepnorm.chem.layout import feature_columns, mol_feature_dim

    generators = mf.build_mol_features(["rdkit2d", "morgan"])
    assert [mol_feature_dim(g.name) for g in generators] == [g.dim for g in generators]
    assert feature_columns(["morgan", "rdkit2d"]) == {"morgan": (0, 2048),
                                                      "rdkit2d": (2048, 2222)}
    with pytest.raises(ValueError, match="unknown molecule feature"):
        mol_feature_dim("maccs")


@pytest.mark.parametrize("name, dim", [("rdkit2d_screen", 163), ("rdkit2d_lean", 162)])
def test_smaller_descriptor_sets_are_rdkit2d_columns(name, dim):
    from graphormer_sepnorm.chem.layout import LEFT_OUT, mol_feature_dim

    names = [item["name"] for item in mf.descriptor_spec()]
    assert LEFT_OUT[name] <= set(names)
    kept = [k for k, item in enumerate(names) if item not in LEFT_OUT[name]]
    assert mol_feature_dim(name) == len(kept) == dim
    (features,) = mf.build_mol_features([name])
    for smiles in ODD_MOLECULES[:4]:  # QED (kept by rdkit2d_screen) still reuses its five
        mol = Chem.MolFromSmiles(smiles)
        np.testing.assert_array_equal(features(mol), mf.RDKit2D()(mol)[kept])


def test_rdkit2d_fast_is_rdkit2d_without_the_costliest_descriptors():
    from graphormer_sepnorm.chem.layout import FAST_LEFT_OUT, feature_columns, mol_feature_dim
    from graphormer_sepnorm.ensemble.fingerprint_gp import gp_columns

    names = [item["name"] for item in mf.descriptor_spec()]
    assert FAST_LEFT_OUT <= set(names)  # every name left out is one of the spec's
    kept = [k for k, name in enumerate(names) if name not in FAST_LEFT_OUT]
    assert mol_feature_dim("rdkit2d_fast") == len(kept) == 150
    mol = Chem.MolFromSmiles("CC(=O)Nc1ccc(O)cc1")
    np.testing.assert_array_equal(mf.RDKit2DFast()(mol), mf.RDKit2D()(mol)[kept])
    # the GP takes either descriptor feature as its descriptor kernel's columns
    columns = feature_columns(["rdkit2d_fast", "morgan"])
    assert gp_columns({"mol_features": ["rdkit2d_fast", "morgan"]}) == {
        "rdkit2d": columns["rdkit2d_fast"], "morgan": columns["morgan"]}
