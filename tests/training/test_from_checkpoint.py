"""``checkpoint_data``: the datamodule a checkpoint was fit on, as ``--data`` for test/predict."""

import json

import torch

from graphormer_sepnorm.training.from_checkpoint import checkpoint_data, with_checkpoint_data

CSV = "graphormer_sepnorm.datasets.SmilesCSVDataModule"


def saved(tmp_path, hparams: dict, name: str = "model") -> str:
    path = tmp_path / f"{name}.ckpt"
    torch.save({"state_dict": {}, "datamodule_hyper_parameters": hparams}, path)
    return str(path)


def test_csv_checkpoints_from_before_hashed_ties_keep_their_file_order_split(tmp_path):
    old = saved(tmp_path, {"_class_path": CSV, "path": "a.csv", "split": "scaffold",
                           "multi_hop_max_dist": 5})
    assert checkpoint_data(old) == {"class_path": CSV, "init_args": {
        "path": "a.csv", "split": "scaffold", "scaffold_ties": "file_order"}}
    new = saved(tmp_path, {"_class_path": CSV, "path": "a.csv", "scaffold_ties": "hashed"},
                "new")
    assert checkpoint_data(new)["init_args"]["scaffold_ties"] == "hashed"
    args = with_checkpoint_data(["test", "--ckpt_path", old])
    assert json.loads(args[2])["init_args"]["scaffold_ties"] == "file_order"


def test_other_datamodules_get_no_scaffold_setting(tmp_path):
    other = saved(tmp_path, {"_class_path": "graphormer_sepnorm.datasets.ZincDataModule",
                             "subset": True})
    assert checkpoint_data(other)["init_args"] == {"subset": True}
    assert checkpoint_data(saved(tmp_path, {})) is None
