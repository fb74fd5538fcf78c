"""Recipes by name, datamodules by short name, and the callbacks every fit gets from the CLI."""

import sys
from pathlib import Path

import pytest
import yaml
from tiny_data import SMILES

from graphormer_sepnorm.cli import main
from graphormer_sepnorm.recipes import RECIPES, recipe_path, resolve_configs
from graphormer_sepnorm.training.checkpointing import BestCheckpoint

TINY = ["--model.config.num_layers", "2", "--model.init_from", "none", "--data.batch_size", "8",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


@pytest.fixture(autouse=True)
def _plain_argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["graphormer-sepnorm"])


def test_recipes_resolve_by_name_and_files_win(tmp_path, monkeypatch):
    assert {"smiles_csv", "molhiv", "zinc", "zinc_subset", "pretrain_zinc", "cpu_10min",
            "gpu_fast"} <= set(RECIPES)
    assert recipe_path("presets/cpu_10min") == recipe_path("cpu_10min.yaml")
    with pytest.raises(FileNotFoundError, match="bundled: .*smiles_csv"):
        recipe_path("no_such_recipe")
    monkeypatch.chdir(tmp_path)
    args = ["fit", "--config", "smiles_csv", "--config=molhiv", "--config", "mine.yaml"]
    assert resolve_configs(args) == ["fit", "--config", str(RECIPES["smiles_csv"]),
                                     f"--config={RECIPES['molhiv']}", "--config", "mine.yaml"]
    (tmp_path / "smiles_csv").write_text("seed_everything: 1\n")  # a file of that name wins
    assert resolve_configs(["--config", "smiles_csv"]) == ["--config", "smiles_csv"]


def test_print_config_shows_the_default_callbacks_and_no_recipe_lists_them(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--config", "smiles_csv", "--print_config"])
    config = yaml.safe_load(capsys.readouterr().out)
    paths = [c["class_path"] for c in config["trainer"]["callbacks"]]
    assert paths[0] == "graphormer_sepnorm.training.checkpointing.BestCheckpoint"
    assert paths.count("lightning.pytorch.callbacks.ModelCheckpoint") == 2
    assert "graphormer_sepnorm.training.batch_statistics.ReestimateGraphTokenStatistics" in paths
    assert config["model"]["statistics_graphs"] == 256
    for path in RECIPES.values():
        assert "callbacks" not in path.read_text(), path


def test_a_binary_fit_by_recipe_name_and_short_datamodule_name(tmp_path, monkeypatch):
    """As after ``pip install``: no configs/ folder, ``--data.task binary`` alone."""
    monkeypatch.chdir(tmp_path)
    rows = "\n".join(f"{s},{i % 2}" for i, s in enumerate(SMILES))
    Path("assay.csv").write_text(f"smiles,active\n{rows}\n")
    cli = main(["fit", "--config", "smiles_csv", "--data", "SmilesCSVDataModule",
                "--data.path", "assay.csv", "--data.target_columns", "[active]",
                "--data.task", "binary", "--data.split", "random", "--trainer.max_epochs", "2",
                "--test_best", "false", *TINY])
    best = cli.trainer.checkpoint_callback
    assert isinstance(best, BestCheckpoint)
    assert (best.monitor, best.mode) == ("val/roc_auc", "max")
    assert Path(best.best_model_path).is_file() and Path(best.dirpath, "last.ckpt").is_file()
    assert Path(best.dirpath).resolve().is_relative_to(tmp_path / "runs" / "smiles_csv")
