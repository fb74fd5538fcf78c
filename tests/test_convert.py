"""One checkpoint format: the reader takes only it, ``graphormer-sepnorm-convert`` makes it.

``tests/old_format.py`` writes the oldest format (flat hyperparameters, a top-level scaler);
format 1 is today's layout without the version stamp.
"""

import lightning.pytorch as pl
import pytest
import torch
from graphs import random_graph
from old_format import downgrade
from tiny_data import SMILES, featurize_with_paths
from torch.utils.data import DataLoader

from graphormer_sepnorm.checkpoints import (
    FORMAT_KEY,
    FORMAT_VERSION,
    CheckpointError,
    read_checkpoint,
    stamp,
)
from graphormer_sepnorm.chem.featurizers import ZincFeaturizer
from graphormer_sepnorm.cli import main as cli_main
from graphormer_sepnorm.convert import convert, convert_datamodule, main
from graphormer_sepnorm.data import GraphormerCollator, add_shortest_paths
from graphormer_sepnorm.nn.config import GraphormerConfig
from graphormer_sepnorm.prediction import load_checkpoint
from graphormer_sepnorm.prediction.checkpoints import export_checkpoint
from graphormer_sepnorm.training import GraphormerModule

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
    else:
        module.task.logit_scale.fill_(1.5)
    return module.eval()


def payload(module: GraphormerModule) -> dict:
    return {"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams),
            "model_card": {"name": "tiny"}, "pytorch-lightning_version": pl.__version__}


def assert_same_state(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    assert all(torch.equal(a[k], b[k]) for k in a)


def batch_of(n: int):
    graphs, _ = featurize_with_paths(SMILES[:n], ZincFeaturizer(max_atoms=100))
    return GraphormerCollator(5)(graphs)


@pytest.mark.parametrize("task", ["regression", "binary"])
def test_convert_reads_the_oldest_format_as_the_current(task):
    current = stamp(payload(module_for(task)))
    old = downgrade(current)
    assert "config" not in old["hyper_parameters"] and "target_mean" in old["state_dict"]
    new = convert(old)
    assert new[FORMAT_KEY] == FORMAT_VERSION and new["model_card"] == {"name": "tiny"}
    kept = {k: v for k, v in current["hyper_parameters"].items()
            if k not in ("backend", "init_from")}
    assert new["hyper_parameters"] == kept
    state = dict(current["state_dict"])
    if task == "binary":  # the oldest format knew no temperature: 1, as it was trained
        state["task.logit_scale"] = torch.ones(1)
    assert_same_state(new["state_dict"], state)
    assert "target_mean" in old["state_dict"] and FORMAT_KEY not in old  # input left as it was
    again = convert(current)  # a current checkpoint comes back equal
    assert again["hyper_parameters"] == current["hyper_parameters"]
    assert_same_state(again["state_dict"], current["state_dict"])


@pytest.mark.parametrize("old", ["format1", "oldest"])
def test_a_converted_file_predicts_exactly_as_before(tmp_path, old, capsys):
    module = module_for("regression")
    written = payload(module) if old == "format1" else downgrade(payload(module))
    torch.save(written, tmp_path / "old.ckpt")
    main([str(tmp_path / "old.ckpt"), str(tmp_path / "new.ckpt")])
    assert "checkpoint format 2" in capsys.readouterr().out
    batch = batch_of(8)
    with torch.no_grad():
        expected = module(batch)
        for loaded in (load_checkpoint(tmp_path / "new.ckpt"),
                       GraphormerModule.load_from_checkpoint(tmp_path / "new.ckpt").eval()):
            assert_same_state(loaded.state_dict(), module.state_dict())
            assert torch.equal(loaded(batch), expected)
    with pytest.raises(SystemExit):  # NEW exists
        main([str(tmp_path / "old.ckpt"), str(tmp_path / "new.ckpt")])
    main([str(tmp_path / "new.ckpt"), str(tmp_path / "new.ckpt"), "--overwrite"])
    assert read_checkpoint(tmp_path / "new.ckpt")[FORMAT_KEY] == FORMAT_VERSION


def test_every_reader_refuses_an_earlier_format_and_names_the_converter(tmp_path):
    path = tmp_path / "old.ckpt"
    torch.save(payload(module_for("regression")), path)
    for read in (read_checkpoint, load_checkpoint):
        with pytest.raises(CheckpointError, match="graphormer-sepnorm-convert .*old.ckpt NEW"):
            read(path)
    with pytest.raises(CheckpointError, match="graphormer-sepnorm-convert OLD.ckpt NEW"):
        GraphormerModule.load_from_checkpoint(path)  # Lightning's: the path is not passed on
    with pytest.raises(CheckpointError, match="format 1, from an earlier"):
        cli_main(["test", "--ckpt_path", str(path)])
    with pytest.raises(CheckpointError, match="export|format 1"):
        export_checkpoint(path, tmp_path / "copy.ckpt")
    torch.save(payload(module_for("regression")) | {FORMAT_KEY: FORMAT_VERSION + 1}, path)
    with pytest.raises(CheckpointError, match="from a newer graphormer-sepnorm"):
        read_checkpoint(path)
    with pytest.raises(CheckpointError, match="not found"):
        read_checkpoint(tmp_path / "missing.ckpt")


def test_datamodule_settings_of_earlier_formats_convert():
    csv = {"_class_path": "graphormer_sepnorm.datasets.SmilesCSVDataModule", "engine": "device",
           "train_length": "longest", "replica_seeds": [0, 1], "train_tokens": 4096}
    assert convert_datamodule(csv) == {
        "_class_path": "graphormer_sepnorm.datasets.SmilesCSVDataModule",
        "engine": {"class_path": "graphormer_sepnorm.grid.GridEngine",
                   "init_args": {"train_length": "longest"}},
        "scaffold_ties": "file_order"}
    zinc = {"_class_path": "graphormer_sepnorm.datasets.ZINCDataModule", "engine": "loader"}
    assert convert_datamodule(zinc) == {**zinc, "engine": None}
    hashed = {**csv, "scaffold_ties": "hashed", "engine": None}
    assert convert_datamodule(hashed)["scaffold_ties"] == "hashed"


def test_flat_adamw_states_of_packed_fits_convert_to_torchs_adamw():
    flat = torch.nn.Parameter(torch.randn(2, 5))
    flat.grad = torch.randn(2, 5)
    optimizer = torch.optim.AdamW([flat], lr=0.1, fused=True)
    optimizer.step()
    saved = optimizer.state_dict()
    old = {**saved, "param_groups": [{k: v for k, v in g.items() if k not in ("fused",)}
                                     | {"decay_mask": torch.ones(5), "capturable": True}
                                     for g in saved["param_groups"]]}
    new = convert({"optimizer_states": [old]})["optimizer_states"][0]
    assert new["param_groups"][0]["fused"] and not new["param_groups"][0]["capturable"]
    assert "decay_mask" not in new["param_groups"][0]
    again = torch.optim.AdamW([flat], lr=0.1, fused=True)
    again.load_state_dict(new)
    again.step()  # resumes


def test_checkpoints_written_by_lightning_are_stamped_and_round_trip(tmp_path):
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
    ckpt = read_checkpoint(tmp_path / "m.ckpt")
    hparams = ckpt["hyper_parameters"]
    assert ckpt[FORMAT_KEY] == FORMAT_VERSION
    assert hparams["config"] == module.config.to_dict() and hparams["backend"] == "reference"
    assert isinstance(hparams["config"], dict) and hparams["config"]["atom_feature_dims"] == [5, 3]
    again = GraphormerModule.load_from_checkpoint(tmp_path / "m.ckpt")
    assert again.config == module.config and not again.config.sepnorm
    assert again.hparams == module.hparams
    assert_same_state(again.state_dict(), module.state_dict())
