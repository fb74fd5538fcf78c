"""Molecule features: the descriptor transforms, Morgan counts, and the featurizer carrying them."""

import math

import numpy as np
import pytest
import torch
from rdkit import Chem
from rdkit.Chem import Descriptors

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


ODD_MOLECULES = ["CC(=O)Nc1ccc(O)cc1", "C[N+](C)(C)CC(=O)[O-]", "[2H]C([2H])([2H])c1ccccc1",
                 "O=[N+]([O-])c1ccc2[nH]c3ccccc3c2c1", "C1CC2CCC1CC2", "N#CC(=O)Cl", "[Na+].[Cl-]",
                 "OC1=C(O)C=C2C(=C1)OC3=CC(=O)C(=CC3=C2C4=CC=CC=C4)O"]


def _alone(function, mol):
    try:
        return float(function(mol))
    except Exception:
        return math.nan


@pytest.mark.parametrize("smiles", ODD_MOLECULES)
def test_rdkit2d_is_rdkits_functions_one_by_one(smiles):
    # all on one molecule (RDKit caching what several share on it) as each on a fresh copy
    features, functions = mf.RDKit2D(), dict(Descriptors.descList)
    for mol in (Chem.MolFromSmiles(smiles), Chem.AddHs(Chem.MolFromSmiles(smiles))):
        plain = np.array([_alone(functions[item["name"]], Chem.Mol(mol))
                          for item in features.spec])
        plain[~np.isfinite(plain)] = math.nan
        np.testing.assert_array_equal(features.raw(Chem.Mol(mol)), plain)
        expected = np.nan_to_num(features.transform(plain), nan=0.0).astype(np.float32)
        np.testing.assert_array_equal(features(mol), expected)


def test_rdkit2d_failing_descriptor_is_the_mean(monkeypatch):
    features = mf.RDKit2D()

    def broken(mol, memo):
        raise RuntimeError("no value")

    features.shared.steps[0] = broken
    assert features(Chem.MolFromSmiles("CCO"))[0] == 0.0


def test_morgan_counts_of_ethane():
    # two identical CH3 atoms (count 2); at radius 1 both cover the same bond, which RDKit
    # counts once (a redundant environment)
    values = mf.MorganCounts()(Chem.MolFromSmiles("CC"))
    assert values.shape == (2048,)
    np.testing.assert_allclose(np.sort(values[values > 0]), [math.log(2), math.log(3)],
                               rtol=1e-6)


def test_build_mol_features_checks_names():
    assert [f.dim for f in mf.build_mol_features(["morgan", "rdkit2d"])] == [2048, 174]
    with pytest.raises(ValueError, match="unknown molecule feature 'maccs'"):
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




@pytest.mark.parametrize("name, kept", [("rdkit2d_screen", 163), ("rdkit2d_lean", 162),
                                        ("rdkit2d_fast", 150)])
def test_a_removed_descriptor_subset_fails_with_what_to_do(name, kept):
    from graphormer_sepnorm.chem.layout import mol_feature_dim

    message = f"{name!r} was removed: it was a subset of 'rdkit2d' \\({kept} of its 174"
    config = {"name": "ogb", "mol_features": [name, "morgan"],  # as an old checkpoint has it
              "mol_feature_columns": {name: [0, kept], "morgan": [kept, kept + 2048]}}
    for call in (lambda: mol_feature_dim(name), lambda: mf.build_mol_features([name]),
                 lambda: featurizer_from_config(config)):
        with pytest.raises(ValueError, match=message):
            call()
