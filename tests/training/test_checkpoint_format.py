"""Checkpoints store the config as plain values; those of the previous format still load."""

import lightning.pytorch as pl
import pytest
import torch
from graphs import random_graph
from old_format import downgrade
from tiny_data import SMILES, featurize_with_paths
from torch.utils.data import DataLoader

from graphormer_sepnorm.chem.featurizers import ZincFeaturizer
from graphormer_sepnorm.data import GraphormerCollator, add_shortest_paths
from graphormer_sepnorm.nn.config import GraphormerConfig
from graphormer_sepnorm.prediction import load_checkpoint
from graphormer_sepnorm.prediction.checkpoints import export_checkpoint
from graphormer_sepnorm.training import GraphormerModule
from graphormer_sepnorm.training.checkpoint_format import is_current, upgrade

TINY = GraphormerConfig(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=4,
                        multi_hop_max_dist=5)
pytestmark = pytest.mark.usefixtures("one_thread")


def module_for(task: str) -> GraphormerModule:
    featurizer = ZincFeaturizer(max_atoms=100)
    info = {"name": "tiny", "task": task, "target_names": ["y"],
            "atom_feature_dims": featurizer.atom_feature_dims,
            "edge_feature_dims": featurizer.edge_feature_dims,
            "featurizer": featurizer.to_config()}
    module = GraphormerModule(info, TINY, warmup_steps=0.2)
    graphs, _ = featurize_with_paths(SMILES, featurizer)
    with torch.no_grad():  # running statistics of their own
        module.train().model(GraphormerCollator(5)(graphs))
    if module.task.scales_targets:
        module.task.set_scaler([2.0], [3.0])
    return module.eval()


def payload(module: GraphormerModule) -> dict:
    return {"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams),
            "model_card": {"name": "tiny"}}


def assert_same_state(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("task", ["regression", "binary"])
def test_upgrade_reads_the_previous_format_as_the_current(task):
    current = payload(module_for(task))
    old = downgrade(current)
    assert "config" not in old["hyper_parameters"] and "target_mean" in old["state_dict"]
    kept = {k: v for k, v in current["hyper_parameters"].items()
            if k not in ("backend", "init_from")}
    new = upgrade(old)
    assert new["hyper_parameters"] == kept and new["model_card"] == {"name": "tiny"}
    # the previous format knew no temperature: a binary task loads it as 1 (uncalibrated)
    state = {k: v for k, v in current["state_dict"].items() if k != "task.logit_scale"}
    assert sorted(new["state_dict"]) == sorted(state)
    assert all(torch.equal(new["state_dict"][k], v) for k, v in state.items())
    loaded = module_for(task)
    loaded.load_state_dict(new["state_dict"])
    assert_same_state(loaded.state_dict(), current["state_dict"])
    assert "target_mean" in old["state_dict"]  # the input is left as it was
    assert not is_current(old) and is_current(new)
    again = upgrade(current)
    assert again["hyper_parameters"] == current["hyper_parameters"]
    assert_same_state(again["state_dict"], current["state_dict"])


def test_previous_format_loads_for_prediction_and_lightning(tmp_path):
    module = module_for("regression")
    path = tmp_path / "old.ckpt"
    # as Lightning wrote it (its loader wants the version; prediction does not)
    torch.save(downgrade(payload(module)) | {"pytorch-lightning_version": pl.__version__}, path)
    graphs, _ = featurize_with_paths(SMILES[:4], ZincFeaturizer(max_atoms=100))
    batch = GraphormerCollator(5)(graphs)
    with torch.no_grad():
        expected = module(batch)
        for loaded in (load_checkpoint(path),
                       GraphormerModule.load_from_checkpoint(path).eval()):
            assert loaded.config == module.config
            assert_same_state(loaded.state_dict(), module.state_dict())
            assert torch.equal(loaded(batch), expected)
    exported = export_checkpoint(path, tmp_path / "new.ckpt", {"note": "upgraded"})
    written = torch.load(exported, weights_only=True)
    assert is_current(written) and "task.target_mean" in written["state_dict"]


def test_lightning_checkpoint_is_plain_and_round_trips(tmp_path):
    info = {"task": "regression", "target_names": ["y"], "atom_feature_dims": [5, 3],
            "edge_feature_dims": [4, 2]}
    module = GraphormerModule(info, TINY.replace(sepnorm=False), backend="reference",
                              total_steps=4, warmup_steps=1)
    graphs = add_shortest_paths([random_graph(4 + i % 5, i, p=0.4, y=float(i))
                                 for i in range(8)])
    loader = DataLoader(graphs, batch_size=4, collate_fn=GraphormerCollator(5))
    trainer = pl.Trainer(max_steps=2, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path)
    trainer.fit(module, loader)
    trainer.save_checkpoint(tmp_path / "m.ckpt")
    ckpt = torch.load(tmp_path / "m.ckpt", weights_only=True)
    hparams = ckpt["hyper_parameters"]
    assert hparams["config"] == module.config.to_dict() and hparams["backend"] == "reference"
    assert isinstance(hparams["config"], dict) and hparams["config"]["atom_feature_dims"] == [5, 3]
    again = GraphormerModule.load_from_checkpoint(tmp_path / "m.ckpt")
    assert again.config == module.config and not again.config.sepnorm
    assert again.hparams == module.hparams
    assert_same_state(again.state_dict(), module.state_dict())
