"""The Lightning CLI end to end on tiny data in the real on-disk formats."""

from pathlib import Path

import pytest
import torch
import yaml
from old_format import downgrade

from graphormer_sepnorm.cli import main
from graphormer_sepnorm.convert import convert_file

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TINY = ["--model.config.num_layers", "2", "--model.config.hidden_dim", "16",
        "--model.config.ffn_dim", "16", "--model.config.num_heads", "4", "--data.batch_size", "4",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


@pytest.fixture
def mirror(tiny_mirror) -> Path:
    return tiny_mirror


@pytest.fixture(autouse=True)
def _plain_argv(monkeypatch, mirror):
    monkeypatch.setattr("sys.argv", ["graphormer-sepnorm"])
    monkeypatch.setenv("GRAPHORMER_SEPNORM_DATA_MIRROR", str(mirror))


def common(tmp_path: Path, config: str, *extra: str) -> list[str]:
    return ["--config", str(CONFIGS / config), *extra, "--data.root", str(tmp_path / "data"),
            "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"),
            "--trainer.default_root_dir", str(tmp_path), *TINY]


@pytest.mark.parametrize("config", ["zinc_subset.yaml", "molhiv.yaml"])
def test_fit_fast_dev_run_links_data_into_model(tmp_path, config):
    cli = main(["fit", *common(tmp_path, config), "--trainer.fast_dev_run", "true"])
    info = cli.model.hparams["dataset_info"]
    assert info == cli.datamodule.dataset_info
    assert info["task"] == ("binary" if config == "molhiv.yaml" else "regression")
    assert cli.datamodule.multi_hop_max_dist == cli.model.config.multi_hop_max_dist
    assert cli.trainer.state.finished


def test_preset_stacks_on_a_dataset_config(tmp_path):
    preset = str(CONFIGS / "presets" / "cpu_10min.yaml")
    cli = main(["fit", *common(tmp_path, "molhiv.yaml", "--config", preset),
                "--trainer.fast_dev_run", "true"])
    assert cli.model.config.num_layers == 2  # the command line comes last
    assert cli.model.config.hidden_dim == 16 and cli.model.config.multi_hop_max_dist == 5
    assert cli.model.hparams["total_steps"] == 1200
    assert cli.model.hparams["lr"] == pytest.approx(5e-4)
    assert cli.datamodule.batch_size == 4 and cli.datamodule.eval_batch_size == 256


def test_fit_on_the_reference_backend(tmp_path, monkeypatch):
    # the path a GPU takes (full bias, SDPA, composed SepNorm) trains end to end on the CPU too
    from graphormer_sepnorm.nn import cpu

    monkeypatch.setattr(cpu, "encode", lambda *a: pytest.fail("the CPU backend ran"))
    cli = main(["fit", *common(tmp_path, "zinc_subset.yaml", "--model.backend", "reference"),
                "--trainer.fast_dev_run", "true"])
    assert cli.model.model.backend == "reference" and cli.model.model.fast_encode is None
    assert cli.trainer.state.finished


def test_sharenorm_is_one_switch(tmp_path):
    cli = main(["fit", *common(tmp_path, "zinc_subset.yaml", "--model.config.sepnorm", "false"),
                "--trainer.fast_dev_run", "true"])
    norms = {type(m).__name__ for m in cli.model.model.modules()}
    assert "ShareNorm" in norms and "SepNorm" not in norms


def test_fit_checkpoints_then_test_and_validate_from_checkpoint(tmp_path):
    fit = main(["fit", *common(tmp_path, "molhiv.yaml"), "--trainer.max_epochs", "2",
                "--model.total_steps", "null"])
    ckpt_dir = Path(fit.trainer.checkpoint_callback.dirpath)
    best = Path(fit.trainer.checkpoint_callback.best_model_path)
    assert (ckpt_dir / "last.ckpt").is_file() and best.is_file() and best.name.startswith("best-")
    assert "val/roc_auc" in fit.trainer.callback_metrics
    # checkpoints hold plain values only
    ckpt = torch.load(best, weights_only=True, map_location="cpu")
    # each validation calibrated the probabilities' temperature; the checkpoint keeps it
    scale = ckpt["state_dict"]["task.logit_scale"]
    assert float(fit.trainer.callback_metrics["val/logit_scale"]) > 0 and scale.shape == (1,)
    assert ckpt["hyper_parameters"]["dataset_info"]["target_names"] == ["hiv_active"]
    assert ckpt["hyper_parameters"]["config"] == fit.model.config.to_dict()
    logged = yaml.safe_load((ckpt_dir.parent / "hparams.yaml").read_text())
    assert logged["config"]["hidden_dim"] == 16 and logged["config"]["num_tasks"] == 1

    test = main(["test", *common(tmp_path, "molhiv.yaml"), "--ckpt_path", str(best)])
    metrics = test.trainer.callback_metrics
    assert set(metrics) >= {"test/roc_auc", "test/pr_auc", "test/ece", "test/loss"}
    assert 0.0 <= float(metrics["test/roc_auc"]) <= 1.0
    # the test run scored the checkpoint's weights, not the fresh ones
    weights = ckpt["state_dict"]["model.head.weight"]
    assert torch.equal(test.model.model.head.weight, weights)
    assert torch.equal(test.model.task.logit_scale, scale)
    # a checkpoint of the oldest format (flat model hyperparameters), converted, tests the same
    torch.save(downgrade(ckpt), tmp_path / "old.ckpt")
    convert_file(tmp_path / "old.ckpt", tmp_path / "old.ckpt")
    old = main(["test", *common(tmp_path, "molhiv.yaml"), "--ckpt_path",
                str(tmp_path / "old.ckpt")])
    assert float(old.trainer.callback_metrics["test/roc_auc"]) == float(metrics["test/roc_auc"])
    assert old.model.config == test.model.config
    # ... and one saved before temperature scaling: uncalibrated, the same ranking
    del ckpt["state_dict"]["task.logit_scale"]
    torch.save(ckpt, tmp_path / "uncalibrated.ckpt")
    convert_file(tmp_path / "uncalibrated.ckpt", tmp_path / "uncalibrated.ckpt")
    plain = main(["test", *common(tmp_path, "molhiv.yaml"), "--ckpt_path",
                  str(tmp_path / "uncalibrated.ckpt")])
    assert torch.equal(plain.model.task.logit_scale, torch.ones(1))
    assert float(plain.trainer.callback_metrics["test/roc_auc"]) == pytest.approx(
        float(metrics["test/roc_auc"]), abs=1e-6)

    val = main(["validate", *common(tmp_path, "molhiv.yaml"), "--ckpt_path", str(best)])
    assert float(val.trainer.callback_metrics["val/roc_auc"]) == pytest.approx(
        float(fit.trainer.checkpoint_callback.best_model_score), abs=1e-6)


def test_fit_starts_from_another_runs_weights(tmp_path, capsys):
    first = main(["fit", *common(tmp_path, "molhiv.yaml"), "--trainer.max_steps", "2",
                  "--model.warmup_steps", "1", "--model.total_steps", "2"])
    last = Path(first.trainer.checkpoint_callback.dirpath) / "last.ckpt"
    capsys.readouterr()
    second = main(["fit", *common(tmp_path, "molhiv.yaml", "--model.init_from", str(last)),
                   "--trainer.fast_dev_run", "true"])
    assert f"init_from {last}: loaded" in capsys.readouterr().out
    assert second.model.hparams["init_from"] == str(last)


def test_zinc_test_reports_mae(tmp_path):
    fit = main(["fit", *common(tmp_path, "zinc_subset.yaml"), "--trainer.max_steps", "3",
                "--model.warmup_steps", "1", "--model.total_steps", "3"])
    last = Path(fit.trainer.checkpoint_callback.dirpath) / "last.ckpt"
    test = main(["test", *common(tmp_path, "zinc_subset.yaml"), "--ckpt_path", str(last)])
    metrics = test.trainer.callback_metrics
    assert float(metrics["test/mae"]) > 0 and float(metrics["test/rmse"]) >= float(
        metrics["test/mae"])
    assert "test/r2" in metrics and "val/rmse" in fit.trainer.callback_metrics


def test_console_script_exits_zero_after_success(monkeypatch):
    """``sys.exit(main())`` would print the returned CLI object and exit with status 1."""
    from graphormer_sepnorm import cli

    pyproject = (CONFIGS.parent / "pyproject.toml").read_text()
    assert 'graphormer-sepnorm = "graphormer_sepnorm.cli:run"' in pyproject
    monkeypatch.setattr(cli, "main", lambda: object())
    assert cli.run() is None
