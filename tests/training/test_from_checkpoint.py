"""``checkpoint_data``: the datamodule a checkpoint was fit on, as ``--data`` for test/predict."""

import json

import torch

from graphormer_sepnorm.checkpoints import stamp
from graphormer_sepnorm.training.from_checkpoint import checkpoint_data, with_checkpoint_data

CSV = "graphormer_sepnorm.datasets.SmilesCSVDataModule"


def saved(tmp_path, hparams: dict, name: str = "model") -> str:
    path = tmp_path / f"{name}.ckpt"
    torch.save(stamp({"state_dict": {}, "datamodule_hyper_parameters": hparams}), path)
    return str(path)


def test_the_checkpoints_datamodule_comes_first_on_the_command_line(tmp_path):
    path = saved(tmp_path, {"_class_path": CSV, "path": "a.csv", "scaffold_ties": "hashed",
                            "multi_hop_max_dist": 5, "replica_seeds": [0, 1]})
    data = {"class_path": CSV, "init_args": {"path": "a.csv", "scaffold_ties": "hashed"}}
    assert checkpoint_data(path) == data  # the linked settings come from the model
    args = with_checkpoint_data(["test", "--ckpt_path", path, "--data.path", "b.csv"])
    assert args[:2] == ["test", "--data"] and json.loads(args[2]) == data
    # without a config, the test logs into the checkpoint's run folder, not ./lightning_logs
    assert args[3] == "--trainer.logger" and json.loads(args[4])["init_args"] == {
        "save_dir": str(tmp_path), "name": "test"}
    assert args[5:] == ["--ckpt_path", path, "--data.path", "b.csv"]
    configured = with_checkpoint_data(["test", "--config", "c.yaml", "--ckpt_path", path])
    assert "--trainer.logger" not in configured
    assert with_checkpoint_data(["fit", "--ckpt_path", path]) == ["fit", "--ckpt_path", path]


def test_other_datamodules_and_none(tmp_path):
    other = saved(tmp_path, {"_class_path": "graphormer_sepnorm.datasets.ZincDataModule",
                             "subset": True})
    assert checkpoint_data(other)["init_args"] == {"subset": True}
    assert checkpoint_data(saved(tmp_path, {})) is None
