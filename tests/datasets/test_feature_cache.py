"""The feature cache: the graphs read back are the graphs featurized; one file a set and
featurizer; the datamodule's hook."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from tiny_data import SMILES, own_csv

from graphormer_sepnorm.chem.featurizers import build_featurizer
from graphormer_sepnorm.chem.parallel import featurize_set
from graphormer_sepnorm.datasets import SmilesCSVDataModule, feature_cache
from graphormer_sepnorm.datasets.feature_cache import cache_key, featurize_cached

ROWS = [*SMILES[:6], "C1CC", "C", *SMILES[6:], "not a smiles"]  # two invalid, one without bonds


def assert_same(got, expected):
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert (a is None) == (b is None)
        if a is None:
            continue
        assert sorted(a.keys()) == sorted(b.keys()) and a.num_nodes == b.num_nodes
        for key in b.keys():
            if isinstance(b[key], torch.Tensor):
                assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
            else:
                assert a[key] == b[key], key


@pytest.mark.parametrize("mol_features", [[], ["rdkit2d", "morgan"]])
def test_cached_graphs_are_the_featurized_ones(tmp_path, monkeypatch, mol_features):
    featurizer = build_featurizer("ogb", mol_features=mol_features)
    expected, errors = featurize_set(ROWS, featurizer)
    first = featurize_cached(ROWS, featurizer, tmp_path / "cache")
    assert (tmp_path / "cache" / f"{cache_key(ROWS, featurizer)}.npz").is_file()
    monkeypatch.setattr(feature_cache, "featurize_set",
                        lambda *a, **k: pytest.fail("featurized again"))
    second = featurize_cached(ROWS, featurizer, tmp_path / "cache")
    for graphs, reasons in (first, second):
        assert_same(graphs, expected)
        assert reasons == errors and reasons[6].startswith("invalid SMILES")
    assert [p.suffix for p in sorted((tmp_path / "cache").iterdir())] == [".lock", ".npz"]


def test_one_file_a_set_and_featurizer(tmp_path):
    ogb, zinc = build_featurizer("ogb"), build_featurizer("zinc")
    morgan = build_featurizer("ogb", mol_features=["morgan"])
    keys = {cache_key(ROWS, ogb), cache_key(ROWS, zinc), cache_key(ROWS, morgan),
            cache_key(ROWS[::-1], ogb), cache_key(ROWS[:-1], ogb), cache_key(["C", "CC"], ogb),
            cache_key(["CC", "C"], ogb), cache_key(["CC", "C", ""], ogb)}
    assert len(keys) == 8 and cache_key(list(ROWS), ogb) == cache_key(ROWS, ogb)
    assert featurize_cached(["C1CC"], ogb, tmp_path) == ([None], [
        featurize_set(["C1CC"], ogb)[1][0]])  # no valid graph at all


def _featurize(folder: str) -> int:
    graphs, _ = featurize_cached(SMILES, build_featurizer("ogb"), folder)
    return sum(g.num_nodes for g in graphs)


def test_workers_share_one_file(tmp_path):
    # threads: each opens the lock file on its own, so flock excludes them as it does processes
    with ThreadPoolExecutor(4) as pool:
        atoms = list(pool.map(_featurize, [str(tmp_path)] * 4))
    assert len(set(atoms)) == 1 and len(list(tmp_path.glob("*.npz"))) == 1
    assert not list(tmp_path.glob(".*partial"))


def test_the_datamodule_featurizes_once_through_its_cache_dir(tmp_path, monkeypatch):
    csv = own_csv(tmp_path / "my.csv", 40)

    def splits(**kwargs) -> dict:
        return SmilesCSVDataModule(str(csv), ["logS"], split="column", **kwargs).load_splits()

    plain = splits()
    cached = splits(cache_dir=str(tmp_path / "cache"))
    monkeypatch.setattr(feature_cache, "featurize_set",
                        lambda *a, **k: pytest.fail("featurized again"))
    again = splits(cache_dir=str(tmp_path / "cache"))
    for name in ("train", "val", "test"):
        assert_same(cached[name], plain[name])
        assert_same(again[name], plain[name])
    assert Path(tmp_path / "cache").is_dir()
