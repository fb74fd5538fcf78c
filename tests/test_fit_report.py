"""Your own molecules through the real command: fit's summary and its log without a terminal."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch
from tiny_data import own_csv

from graphormer_sepnorm.cli import main
from graphormer_sepnorm.training.module import GraphormerModule

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "smiles_csv.yaml"
TINY = ["--model.init_from", "none", "--model.config.num_layers", "2",
        "--model.config.hidden_dim", "16", "--model.config.ffn_dim", "16",
        "--model.config.num_heads", "4", "--data.batch_size", "16",
        "--trainer.enable_model_summary", "false"]


@pytest.fixture(autouse=True)
def _plain_argv(monkeypatch):
    monkeypatch.setattr("sys.argv", ["graphormer-sepnorm"])


def fit_args(tmp_path: Path, csv: Path, *extra: str) -> list[str]:
    return ["fit", "--config", str(CONFIG), "--data.path", str(csv), "--data.target_columns",
            "[logS]", "--data.split", "column", "--data.root", str(tmp_path),
            "--trainer.default_root_dir", str(tmp_path),
            "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), *TINY, *extra]


def test_fit_prints_summary_and_a_small_plain_log(tmp_path, capfd):
    csv = own_csv(tmp_path / "my.csv")
    cli = main(fit_args(tmp_path, csv, "--trainer.max_epochs", "3"))
    out, err = capfd.readouterr()
    log = out + err
    best = cli.trainer.checkpoint_callback.best_model_path
    assert "\r" not in log and len(log.encode()) < 60_000  # no progress-bar redraws
    assert sum(line.startswith("epoch ") for line in out.splitlines()) == 3
    assert "epoch 3/3, step 30: " in out and "val/rmse" in out
    assert "fit finished after 3 epoch(s), 30 step(s)" in out
    assert f"best checkpoint: {best}" in out and f"run folder: {cli.trainer.log_dir}" in out
    assert "last checkpoint: " in out and "last.ckpt" in out
    summary = out[out.index("fit finished"):]
    assert "val/mae" in summary and "val/rmse" in summary and "val/r2" in summary
    assert "test of the best checkpoint: test/mae" in summary and "test/rmse" in summary
    metrics = torch.load(best, weights_only=True)["metrics"]  # plain floats in the checkpoint
    assert isinstance(metrics["val/rmse"], float)


def test_no_test_split_and_opting_out(tmp_path, capsys):
    csv = own_csv(tmp_path / "my.csv", 40, ("train",) * 3 + ("val",))
    main(fit_args(tmp_path, csv, "--trainer.max_epochs", "1"))
    assert "test: no test split" in capsys.readouterr().out
    csv = own_csv(tmp_path / "my2.csv", 40)
    main(fit_args(tmp_path, csv, "--trainer.max_epochs", "1", "--test_best", "false"))
    out = capsys.readouterr().out
    assert "fit finished" in out and "  test" not in out and "test/" not in out


def test_testing_an_earlier_best_leaves_fit_state_alone(tmp_path, capsys):
    """Testing restores callback state from the checkpoint; the summary and fit's CLI object
    still show fit's own: last.ckpt, the best checkpoint, the validation metrics."""
    csv = own_csv(tmp_path / "my.csv", 40)
    # learning nothing and no BatchNorm statistics: later epochs tie, the first stays best
    fit = main(fit_args(tmp_path, csv, "--trainer.max_epochs", "2", "--model.lr", "1e-30",
                        "--model.head_lr", "null", "--model.end_lr", "0",
                        "--model.config.sepnorm", "false", "--model.config.dropout", "0"))
    out = capsys.readouterr().out
    callback = fit.trainer.checkpoint_callback
    assert Path(callback.best_model_path).name == "best-epoch=0-step=2.ckpt"
    last = Path(callback.dirpath) / "last.ckpt"
    assert f"last checkpoint: {last}" in out and torch.load(last)["global_step"] == 4
    assert "test of the best checkpoint: test/mae" in out
    assert "val/mae" in fit.trainer.callback_metrics


def test_ctrl_c_still_prints_the_summary(tmp_path, capsys, monkeypatch):
    def interrupt(self):
        if self.current_epoch == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(GraphormerModule, "on_train_epoch_end", interrupt, raising=False)
    handler = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit):
            main(fit_args(tmp_path, own_csv(tmp_path / "my.csv", 40), "--trainer.max_epochs",
                          "3"))
    finally:
        signal.signal(signal.SIGINT, handler)  # Lightning ignores SIGINT after a Ctrl-C
    out = capsys.readouterr().out
    assert "fit interrupted after 1 epoch(s)" in out
    assert "best checkpoint: " in out and "best-epoch=" in out  # saved at validation end
    assert "test: not run (interrupted)" in out


def test_test_and_validate_from_the_checkpoint_alone(tmp_path, capsys, monkeypatch):
    csv = own_csv(tmp_path / "my.csv", 60)
    # the network alone: with the GP blend, fit validates the network and validate the blend
    # (tests/datasets/test_smiles_csv.py), so the best score would not come back
    fit = main(fit_args(tmp_path, csv, "--trainer.max_epochs", "2", "--gp.weight", "0"))
    best = fit.trainer.checkpoint_callback.best_model_path
    summary = capsys.readouterr().out
    monkeypatch.chdir(tmp_path)  # elsewhere, no config: Lightning's own logs go here
    test = main(["test", "--ckpt_path", best])
    out = capsys.readouterr().out
    metrics = test.trainer.callback_metrics
    assert "test/mae" in out and "test/rmse" in out and "test/r2" in out
    assert f"test/rmse {float(metrics['test/rmse']):.4g}" in summary  # the same checkpoint
    assert test.datamodule.path == str(csv) and test.datamodule.split == "column"
    assert test.model.config.num_layers == 2 and test.datamodule.multi_hop_max_dist == 5
    val = main(["validate", "--ckpt_path", best, "--data.eval_batch_size", "7"])
    assert float(val.trainer.callback_metrics["val/mae"]) == pytest.approx(
        float(fit.trainer.checkpoint_callback.best_model_score), abs=1e-6)
    assert val.datamodule.eval_batch_size == 7  # options still override the checkpoint's

    moved = csv.rename(tmp_path / "moved.csv")
    with pytest.raises(SystemExit) as info:
        main(["test", "--ckpt_path", best])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"data not found: {csv}" in err and "--data.path" in err
    again = main(["test", "--ckpt_path", best, "--data.path", str(moved)])
    assert float(again.trainer.callback_metrics["test/rmse"]) == pytest.approx(
        float(metrics["test/rmse"]), abs=1e-6)


def test_predict_new_molecules_with_the_fitted_checkpoint(tmp_path, capsys):
    from graphormer_sepnorm.predict import main as predict_main

    fit = main(fit_args(tmp_path, own_csv(tmp_path / "my.csv", 40), "--trainer.max_epochs", "1",
                        "--test_best", "false"))
    best = fit.trainer.checkpoint_callback.best_model_path
    bad, out = tmp_path / "bad.csv", tmp_path / "out.csv"
    bad.write_text("smiles\nCCO\nnot_a_smiles\nCCC\n")
    assert predict_main([str(bad), "--strict", "-o", str(out), "--checkpoint", best]) == 1
    assert "line 3:" in capsys.readouterr().err and not out.exists()  # the header is line 1
    assert predict_main([str(bad), "-o", str(out), "--checkpoint", best]) == 0
    # the default GP blend adds a calibrated deviation and a 90% interval
    assert out.read_text().splitlines()[0] == "smiles,logS,logS_std,logS_lo90,logS_hi90,error"
