"""The hyperparameter search on tiny data: workers sharing a study (one of them a SLURM task run by
bash), a worker killed mid-trial and the same command again, a pruned fit, best.yaml on the
recipe; and the search space, the heartbeats and the missing-Optuna message by hand."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import torch
import yaml
from tiny_data import own_csv

from graphormer_sepnorm import hpo
from graphormer_sepnorm.cli import main as cli_main
from graphormer_sepnorm.experiment_results import read_rows
from graphormer_sepnorm.hpo import space as spaces
from graphormer_sepnorm.hpo import study as studies
from graphormer_sepnorm.hpo.command import main
from graphormer_sepnorm.hpo.pruning import TrialPruning

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs" / "smiles_csv.yaml")
TESTS = Path(__file__).resolve().parent
#: A one-layer model from scratch on 32 training molecules, one step an epoch (every batch size
#: of the bundled space holds them all), three epochs.
TINY = ["--data.target_columns", "[logS]", "--data.split", "column", "--data.mol_features",
        "[morgan]", "--model.init_from", "none", "--model.config.num_layers", "1",
        "--model.config.hidden_dim", "16", "--model.config.ffn_dim", "16",
        "--model.config.num_heads", "4", "--trainer.max_epochs", "3",
        "--trainer.enable_model_summary", "false"]


@pytest.fixture(autouse=True)
def _plain_argv(monkeypatch):
    monkeypatch.setattr("sys.argv", ["graphormer-sepnorm-hpo"])


@pytest.fixture
def tiny(tmp_path, monkeypatch) -> Path:
    """A 40-molecule CSV; fits with one thread each, ``tests/`` importable in them."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get(
        "PYTHONPATH", "")]))  # the fits name callbacks of tests/interrupt.py
    return own_csv(tmp_path / "my.csv", 40)


def hpo_argv(tmp_path: Path, name: str, *options: str) -> list[str]:
    return ["--name", name, "--config", CONFIG, *options, "--runs-dir", str(tmp_path / "runs"),
            "--data.path", str(tmp_path / "my.csv"), *TINY]


def print_config(*args: str) -> dict:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), pytest.raises(SystemExit):
        cli_main(["fit", *args, "--print_config"])
    return yaml.safe_load(printed.getvalue())


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    stop = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.monotonic() < stop, f"{path} never appeared"
        time.sleep(0.2)


def test_a_slurm_task_and_a_local_worker_share_one_study(tmp_path, tiny):
    argv = hpo_argv(tmp_path, "shared", "--trials", "3", "--workers", "2")
    assert main([*argv, "--slurm", "--sbatch", "time=01:00:00", "gres=gpu:1"]) == 0
    folder = tmp_path / "runs" / "shared"
    lines = (folder / "array.sbatch").read_text().splitlines()
    assert lines[:6] == ["#!/bin/bash", "#SBATCH --job-name=shared", "#SBATCH --array=0-1",
                         f"#SBATCH --output={folder}/slurm-%A_%a.out",
                         "#SBATCH --time=01:00:00", "#SBATCH --gres=gpu:1"]
    assert "set -euo pipefail" in lines and lines[-1].endswith(" --workers 1")
    assert lines[-1].startswith('"$PYTHON" -m graphormer_sepnorm.hpo.command --name shared ')
    assert "--slurm" not in lines[-1] and "gres" not in lines[-1]
    assert lines[-1].count("--workers") == 1
    assert not (folder / "study.journal").exists()  # written, nothing run
    # task 0 as SLURM runs it, and two workers here beside it once the task has claimed trial 0
    task = subprocess.Popen(["bash", str(folder / "array.sbatch")], text=True,
                            env={**os.environ, "SLURM_ARRAY_TASK_ID": "0"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    wait_for(folder / "trial_0000" / "heartbeat.json", task)
    assert main(argv) == 0
    out = task.communicate(timeout=600)[0]
    assert task.returncode == 0, out[-3000:]
    rows = read_rows(folder / "trials.csv")
    assert [(r["number"], r["state"], r["metric"]) for r in rows] == [
        (str(k), "COMPLETE", "val/mae_blend") for k in range(3)]
    owners = {json.loads((folder / f"trial_000{k}" / "heartbeat.json").read_text())["pid"]
              for k in range(3)}
    assert len(owners) == 2 and os.getpid() in owners  # the task's and this command's
    # trial 0 is the recipe's values
    recipe = yaml.safe_load(Path(CONFIG).read_text())
    assert {k: float(rows[0][k]) for k in ("model.lr", "model.head_lr", "model.weight_decay",
                                           "model.config.dropout", "data.batch_size")} == {
        "model.lr": recipe["model"]["lr"], "model.head_lr": recipe["model"]["head_lr"],
        "model.weight_decay": recipe["model"]["weight_decay"],
        "model.config.dropout": recipe["model"]["config"]["dropout"],
        "data.batch_size": recipe["data"]["init_args"]["batch_size"]}
    # a trial's value: the blend's validation MAE of its best checkpoint
    result = json.loads((folder / "trial_0001" / "result.json").read_text())
    saved = torch.load(result["best_checkpoint"], weights_only=True)["metrics"]
    assert float(rows[1]["value"]) == pytest.approx(saved["val/mae_blend"])
    # best.yaml stacks on the recipe: the fit it configures has the best trial's values
    best = min(rows, key=lambda r: float(r["value"]))
    text = (folder / "best.yaml").read_text()
    assert text.startswith(f"# Study shared: trial {best['number']}, val/mae_blend ")
    assert f"--config {folder / 'best.yaml'} --data.path" in text.splitlines()[1]
    config = print_config("--config", CONFIG, "--config", str(folder / "best.yaml"))
    assert config["model"]["lr"] == pytest.approx(float(best["model.lr"]))
    assert config["model"]["config"]["attention_dropout"] == pytest.approx(
        float(best["model.config.attention_dropout"]))
    assert config["data"]["init_args"]["batch_size"] == int(best["data.batch_size"])
    importances = read_rows(folder / "importances.csv")
    assert len(importances) == 7 and sum(float(r["importance"]) for r in importances) == \
        pytest.approx(1.0, abs=1e-4)
    assert len(list((folder / "features").glob("*.npz"))) == 1  # featurized once, shared


def test_a_worker_killed_mid_trial_is_continued_from_its_last_checkpoint(tmp_path, tiny):
    kill = ["--trainer.callbacks+=interrupt.KillAtStep", "--trainer.callbacks.step", "1",
            "--trainer.callbacks.marker", str(tmp_path / "killed"),
            "--trainer.callbacks.run", "trial_0001", "--trainer.callbacks.group", "true"]
    argv = [*hpo_argv(tmp_path, "killed", "--trials", "2", "--workers", "2"), *kill]
    # the command, its worker threads and both fits SIGKILLed after trial 1's first epoch
    killed = subprocess.run([sys.executable, "-m", "graphormer_sepnorm.hpo.command", *argv],
                            start_new_session=True, capture_output=True, text=True, timeout=600)
    assert killed.returncode == -9, killed.stdout[-2000:] + killed.stderr[-2000:]
    folder = tmp_path / "runs" / "killed"
    last = folder / "trial_0001" / "fit" / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=True)["global_step"] == 1
    journal = str(folder / "study.journal")
    study = optuna.load_study(study_name="killed", storage=studies.open_storage(journal))
    assert study.trials[1].state == optuna.trial.TrialState.RUNNING
    assert main(argv) == 0  # the same command
    study = optuna.load_study(study_name="killed", storage=studies.open_storage(journal))
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 2
    assert [r["state"] for r in read_rows(folder / "trials.csv")] == ["COMPLETE"] * 2
    log = (folder / "trial_0001" / "fit-2.log").read_text()
    assert f"Restoring states from the checkpoint path at {last}" in log
    assert torch.load(last, weights_only=True)["global_step"] == 3
    assert study.trials[1].intermediate_values.keys() == {0, 1, 2}  # epoch 0 reported once


def test_a_pruned_trial_stops_its_fit(tmp_path, tiny):
    journal = str(tmp_path / "study.journal")
    study = optuna.create_study(study_name="p", storage=studies.open_storage(journal))
    for value in (0.01, 0.02):  # two finished trials far better than any tiny fit
        study.add_trial(optuna.trial.create_trial(
            value=value, intermediate_values={0: value, 1: value, 2: value}))
    trial = study.ask()
    pruning = {"class_path": "graphormer_sepnorm.hpo.pruning.TrialPruning", "init_args": {
        "storage": journal, "study": "p", "trial": trial.number,
        "result": str(tmp_path / "result.json"), "n_startup_trials": 1, "n_warmup_steps": 0}}
    cli = cli_main(["fit", "--config", CONFIG, "--data.path", str(tiny), *TINY,
                    "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"),
                    "--test_best", "false", f"--trainer.callbacks+={json.dumps(pruning)}"])
    callback = next(c for c in cli.trainer.callbacks if isinstance(c, TrialPruning))
    assert callback.pruned_at == 0 and cli.trainer.global_step == 1  # of 3 epochs of 1 step
    assert cli.trainer.state.finished  # stopped as an early stop does, not by an error
    result = json.loads((tmp_path / "result.json").read_text())
    reported = study.trials[2].intermediate_values
    assert result["pruned"] and result["metric"] == "val/mae_blend" and list(reported) == [0]
    assert reported[0] == pytest.approx(float(cli.trainer.callback_metrics["val/mae_blend"]))


def test_the_search_space_file(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("model.lr: {low: 1e-5, high: 1e-3, log: true}\n"
                    "trainer.max_epochs: {low: 10, high: 50, step: 10}\n"
                    "data.batch_size: {choices: [32, 64]}\n")
    space = spaces.load_space(path)
    assert space["model.lr"].distribution() == optuna.distributions.FloatDistribution(
        1e-5, 1e-3, log=True)
    assert space["trainer.max_epochs"].distribution() == \
        optuna.distributions.IntDistribution(10, 50, step=10)
    assert spaces.contains(space["data.batch_size"], 64)
    assert not spaces.contains(space["model.lr"], 2e-3)
    assert spaces.overrides({"model.lr": 1e-4, "model.init_from": None, "x": "a b"}) == [
        "--model.lr", "0.0001", "--model.init_from", "null", "--x", "a b"]
    for text, message in [("model.lr: {low: 1, high: 0.5}", "low .1. must be below high"),
                          ("model.lr: {low: a, high: 1}", "model.lr.low must be a number"),
                          ("model.lr: {min: 1, max: 2}", "unknown field"),
                          ("model.lr: [1, 2]", "must be {low")]:
        path.write_text(text)
        with pytest.raises(ValueError, match=message):
            spaces.load_space(path)
    config = print_config("--config", CONFIG, "--data.path", "x.csv")
    assert spaces.resolve(config, "data.batch_size") == ("data.init_args.batch_size", 64)
    with pytest.raises(ValueError, match="'model.no_such_key' is not a key of this fit"):
        spaces.recipe_values(config, {"model.no_such_key": space["model.lr"]})
    with pytest.raises(ValueError, match="--model.init_from none"):
        spaces.check_pretrained(config, {"model.config.num_layers": space["trainer.max_epochs"]})
    # values of other keys than the recipe's stack on it too
    keys = {k: spaces.resolve(config, k)[0] for k in ("model.lr", "data.batch_size",
                                                      "model.config.dropout")}
    best = tmp_path / "best.yaml"
    best.write_text(yaml.safe_dump(spaces.stacked(
        {"model.lr": 1e-4, "data.batch_size": 128, "model.config.dropout": 0.25}, keys)))
    stacked = print_config("--config", CONFIG, "--config", str(best), "--data.path", "x.csv")
    assert (stacked["model"]["lr"], stacked["data"]["init_args"]["batch_size"],
            stacked["model"]["config"]["dropout"]) == (1e-4, 128, 0.25)
    assert stacked["model"]["head_lr"] == config["model"]["head_lr"]


def test_the_bundled_space_holds_the_recipe(tmp_path):
    path = spaces.bundled_space("smiles_csv")
    assert path is not None and path.parent.name == "hpo" and spaces.bundled_space("x") is None
    space = spaces.load_space(path)
    config = print_config("--config", CONFIG, "--data.path", "x.csv")
    values = spaces.recipe_values(config, space)
    assert all(spaces.contains(space[k], v) for k, v in values.items())
    assert not set(space) & set(spaces.ARCHITECTURE)  # the pretrained start fixes those
    spaces.check_pretrained(config, space)


def test_stale_trials_by_their_heartbeat(tmp_path):
    folder = tmp_path / "trial_0000"
    assert studies.is_stale(folder, grace=60)  # no heartbeat yet
    studies.write_heartbeat(folder)
    assert not studies.is_stale(folder, grace=60)  # this live process, just now
    os.utime(folder / "heartbeat.json", (time.time() - 120, time.time() - 120))
    assert studies.is_stale(folder, grace=60)  # silent longer than the grace
    with studies.Heartbeat(folder, interval=0.05):
        time.sleep(0.3)
    assert not studies.is_stale(folder, grace=60)  # touched again
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    state = json.loads((folder / "heartbeat.json").read_text())
    (folder / "heartbeat.json").write_text(json.dumps({**state, "pid": int(dead.stdout)}))
    assert studies.is_stale(folder, grace=60)  # a process of this host that is gone
    studies.release(folder)
    assert studies.is_stale(folder, grace=60)


def test_without_optuna_the_command_says_how_to_install_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(SystemExit) as info:
        hpo.run()
    assert info.value.code == 2
    assert "pip install 'graphormer-sepnorm[hpo]'" in capsys.readouterr().err


def test_a_trial_stopped_by_max_time_is_released_and_continued(tmp_path, tiny, monkeypatch):
    """The worker's side of an exit 3 (the fit's side: tests/test_time_limit.py), with the study
    in a database this time; the fits are stand-ins."""
    from graphormer_sepnorm.hpo import workers

    calls = []

    def fit(cmd, log, env):
        calls.append(cmd)
        if len(calls) == 1:
            return 3, None  # stopped by --trainer.max_time
        pruning = next(a for a in cmd if a.startswith("--trainer.callbacks+="))
        result = json.loads(pruning.split("+=", 1)[1])["init_args"]["result"]
        Path(result).write_text(json.dumps({"metric": "val/mae_blend", "value": 0.5,
                                            "pruned": False}))
        return 0, 600.0

    monkeypatch.setattr(workers, "spawn", fit)
    argv = hpo_argv(tmp_path, "timed", "--trials", "1", "--max-time", "00:01:00:00",
                    "--storage", f"sqlite:///{tmp_path / 'study.db'}")
    assert main(argv) == 3
    folder = tmp_path / "runs" / "timed"
    assert json.loads((folder / "trial_0000" / "heartbeat.json").read_text())["released"]
    assert "--trainer.max_time" in calls[0] and "--ckpt_path" in calls[0]
    assert main(argv) == 0  # the same command continues trial 0: no second trial
    assert calls[1][:calls[1].index("--trainer.max_time")] == \
        calls[0][:calls[0].index("--trainer.max_time")]
    rows = read_rows(folder / "trials.csv")
    assert [(r["number"], r["state"], r["value"], r["peak_rss_mb"]) for r in rows] == [
        ("0", "COMPLETE", "0.5", "600")]
    assert not (folder / "study.journal").exists()


def test_the_study_direction_follows_the_task():
    from types import SimpleNamespace

    from graphormer_sepnorm.hpo.command import direction

    def config(task):
        return {"data": {"init_args": {"task": task}}}

    given = SimpleNamespace(direction=None)
    assert direction(given, config("regression")) == "minimize"
    assert direction(given, config("binary")) == "maximize"
    assert direction(given, config("multiclass")) == "maximize"
    assert direction(SimpleNamespace(direction="minimize"), config("binary")) == "minimize"
