"""Prepared splits: written from a datamodule, read back without RDKit, trained through the CLI."""

import json
import sys

import pytest
import torch
from test_cli import CONFIGS, TINY

from graphormer_sepnorm.cli import main
from graphormer_sepnorm.datasets import PreparedDataModule, ZINCDataModule
from graphormer_sepnorm.datasets.prepared import write_prepared


@pytest.fixture
def prepared(tmp_path, tiny_mirror, monkeypatch):
    monkeypatch.setenv("GRAPHORMER_SEPNORM_DATA_MIRROR", str(tiny_mirror))
    source = ZINCDataModule(subset=True, root=str(tmp_path / "data"))
    return source, write_prepared(source, tmp_path / "prepared")


def test_prepared_splits_read_back_as_the_same_graphs(prepared):
    source, folder = prepared
    copy = PreparedDataModule(str(folder))
    copy.setup("fit")
    assert copy.dataset_info == json.loads(json.dumps(source.dataset_info))
    for split, graphs in source.splits.items():
        assert len(copy.splits[split]) == len(graphs)
        for a, b in zip(graphs, copy.splits[split], strict=True):
            for key in ("x", "edge_index", "edge_attr", "y", "spd"):
                assert torch.equal(a[key].reshape(b[key].shape).to(b[key].dtype), b[key]), key


def test_fit_from_prepared_splits_without_rdkit(prepared, tmp_path, monkeypatch):
    _, folder = prepared
    monkeypatch.setattr("sys.argv", ["graphormer-sepnorm"])
    monkeypatch.setitem(sys.modules, "rdkit", None)  # import rdkit now fails
    cli = main(["fit", "--config", str(CONFIGS / "zinc_subset.yaml"), "--data",
                "graphormer_sepnorm.datasets.PreparedDataModule", "--data.path", str(folder),
                "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"),
                "--trainer.default_root_dir", str(tmp_path), *TINY,
                "--trainer.fast_dev_run", "true"])
    assert cli.trainer.state.finished
    assert cli.model.hparams["dataset_info"]["featurizer"]["name"] == "zinc"


def test_molecule_features_are_saved_and_read_back(tmp_path):
    from graphormer_sepnorm.chem.featurizers import OgbFeaturizer
    from graphormer_sepnorm.datasets.prepared import load_graphs, save_graphs

    featurizer = OgbFeaturizer(mol_features=["rdkit2d"])
    graphs = [featurizer(s) for s in ("CCO", "c1ccccc1N")]
    for k, graph in enumerate(graphs):
        graph.y = torch.tensor([[float(k)]])
    save_graphs(tmp_path / "g.npz", graphs)
    for a, b in zip(graphs, load_graphs(tmp_path / "g.npz"), strict=True):
        assert torch.equal(a.mol_x, b.mol_x)
