"""The experiment grid: aggregation on a hand-made CSV, and real grids on tiny data: run here,
killed and continued, packed, and as a SLURM array script (its tasks run by bash here)."""

import os
import re
import subprocess
from pathlib import Path

import pytest
from tiny_data import write_zinc_raw

from graphormer_sepnorm import experiment
from graphormer_sepnorm.experiment import FIELDS, budget_args, main, mean_std, parse_args

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TESTS = Path(__file__).resolve().parent


def row(dataset, norm, seed, val, test, steps=100, seconds=60.0):
    return {"dataset": dataset, "norm": norm, "seed": str(seed), "monitor": "val/mae",
            "best_val": str(val), "test_metric": "test/mae", "test_value": str(test),
            "steps": str(steps), "fit_seconds": str(seconds), "peak_rss_mb": "900",
            "accelerator": "cpu", "checkpoint": "x.ckpt"}


def test_summary_table_means_and_sample_stds():
    rows = [row("zinc", "sepnorm", 0, 0.5, 0.6), row("zinc", "sepnorm", 1, 0.7, 0.8),
            row("zinc", "sepnorm", 2, 0.6, 1.0, seconds=120.0),
            row("zinc", "sharenorm", 0, 0.9, 0.25)]
    table = experiment.summary_table(rows)
    assert table.splitlines() == [
        "| Dataset | Norm | Seeds | Test metric | Test | Best val | Steps | Fit min |",
        "|---|---|---|---|---|---|---|---|",
        # test: mean 0.8, sample std 0.2; val: 0.6 ± 0.1; minutes 1, 1, 2: 1.3 ± 0.6
        "| zinc | sepnorm | 0,1,2 | test/mae | 0.8000 ± 0.2000 | 0.6000 ± 0.1000 | 100 ± 0 "
        "| 1.3 ± 0.6 |",
        "| zinc | sharenorm | 0 | test/mae | 0.2500 | 0.9000 | 100 | 1.0 |",
    ]
    assert mean_std([1.0, 2.0, 4.0], 2) == "2.33 ± 1.53"


def test_budget_arguments_and_times():
    args = parse_args(["--name", "x", "--configs", "a.yaml", "--max-steps", "50"])
    assert budget_args(args) == ["--trainer.max_steps", "50", "--model.total_steps", "50"]
    args = parse_args(["--name", "x", "--configs", "a.yaml", "--max-epochs", "3",
                       "--max-time", "00:00:10:00", "--extra", "--model.lr", "1e-3"])
    assert budget_args(args) == ["--trainer.max_epochs", "3", "--model.total_steps", "null",
                                 "--trainer.max_steps", "-1"]  # max_time goes to fits alone
    assert args.extra == ["--model.lr", "1e-3"] and args.seeds == [0]
    assert args.norms == ["sepnorm", "sharenorm"]
    assert experiment.seconds("01:02:03:04") == 93784
    assert experiment.duration(93784.9) == "01:02:03:04"


def tiny_grid(tmp_path, monkeypatch, name: str, *options: str) -> list[str]:
    """A ZINC-subset grid command on tiny data and a tiny model: 12 training graphs in batches
    of 4, so 6 steps are 2 epochs, validated after each."""
    write_zinc_raw(tmp_path / "mirror" / "ZINC" / "raw")
    monkeypatch.setenv("GRAPHORMER_SEPNORM_DATA_MIRROR", str(tmp_path / "mirror"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get(
        "PYTHONPATH", "")]))  # the fits name callbacks of tests/interrupt.py
    return ["--name", name, "--configs", str(CONFIGS / "zinc_subset.yaml"), *options,
            "--accelerator", "cpu", "--max-steps", "6", "--results-dir",
            str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs"), "--extra",
            "--model.config.num_layers", "2", "--model.config.hidden_dim", "16",
            "--model.config.ffn_dim", "16", "--model.config.num_heads", "4",
            "--model.warmup_steps", "1", "--data.batch_size", "4",
            "--data.root", str(tmp_path / "data"), "--trainer.enable_model_summary", "false"]


def spawned(monkeypatch) -> list[str]:
    """Records the subcommand (fit, test) and cell of each process the grid starts."""
    calls: list[str] = []
    spawn = experiment.spawn

    def record(cmd, log):
        calls.append(f"{cmd[2]} {Path(log).parent.name}")
        return spawn(cmd, log)

    monkeypatch.setattr(experiment, "spawn", record)
    return calls


def test_a_grid_killed_in_its_second_cell_continues_it(tmp_path, monkeypatch):
    kill = ["--trainer.callbacks+", "interrupt.KillAtStep", "--trainer.callbacks.step", "4",
            "--trainer.callbacks.marker", str(tmp_path / "killed"),
            "--trainer.callbacks.run", "sharenorm"]
    argv = [*tiny_grid(tmp_path, monkeypatch, "tiny", "--seeds", "3"), *kill]
    calls = spawned(monkeypatch)
    assert main(argv) == 1  # the second cell's fit was SIGKILLed at step 4
    assert calls == ["fit zinc_subset-sepnorm-seed3", "test zinc_subset-sepnorm-seed3",
                     "fit zinc_subset-sharenorm-seed3"]
    assert len(experiment.read_rows(tmp_path / "results" / "tiny.csv")) == 1
    calls.clear()
    assert main(argv) == 0  # the same command
    assert calls == ["fit zinc_subset-sharenorm-seed3", "test zinc_subset-sharenorm-seed3"]
    second = tmp_path / "runs" / "tiny" / "zinc_subset-sharenorm-seed3"
    # resumed from the checkpoint of the validation at step 3, not started over
    assert re.search(r"Restoring states from the checkpoint path at \S+fit/checkpoints/"
                     r"last\.ckpt", (second / "fit.log").read_text())
    rows = experiment.read_rows(tmp_path / "results" / "tiny.csv")
    assert [(r["dataset"], r["norm"], r["seed"]) for r in rows] == [
        ("zinc_subset", "sepnorm", "3"), ("zinc_subset", "sharenorm", "3")]
    for r in rows:
        assert list(r) == FIELDS and r["monitor"] == "val/mae" and r["test_metric"] == "test/mae"
        assert r["steps"] == "6" and float(r["test_value"]) > 0 and float(r["best_val"]) > 0
        assert Path(r["checkpoint"]).is_file() and Path(r["checkpoint"]).name.startswith("best-")
        assert float(r["fit_seconds"]) > 0 and int(r["peak_rss_mb"]) > 100
        assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", r["commit"])
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", r["date"])
    assert "sepnorm: false" in (second / "fit" / "config.yaml").read_text()
    md = (tmp_path / "results" / "tiny.md").read_text()
    assert md.startswith("# tiny: SepNorm vs ShareNorm\n")
    v = {r["norm"]: f"{float(r['test_value']):.4f}" for r in rows}
    assert f"| zinc_subset | sepnorm | 3 | test/mae | {v['sepnorm']} |" in md
    assert f"| zinc_subset | sharenorm | 3 | test/mae | {v['sharenorm']} |" in md
    assert re.search(r"- Hardware: CPU: .+, \d+ cores; GPU: ", md)
    assert "- Budget: the configs' schedules; max_steps=6" in md
    calls.clear()
    assert main(argv) == 0 and calls == []  # all done: nothing runs


def test_packed_grid_trains_the_seeds_together_and_tests_each(tmp_path, monkeypatch):
    argv = tiny_grid(tmp_path, monkeypatch, "packed", "--seeds", "1", "2", "--norms", "sepnorm",
                     "--packed", "--preset", str(CONFIGS / "presets" / "gpu_fast.yaml"))
    argv += ["--trainer.val_check_interval", "3"]  # the preset validates every 500 steps
    assert main(argv) == 0
    rows = experiment.read_rows(tmp_path / "results" / "packed.csv")
    assert [(r["dataset"], r["norm"], r["seed"]) for r in rows] == [
        ("zinc_subset", "sepnorm", "1"), ("zinc_subset", "sepnorm", "2")]
    assert rows[0]["fit_seconds"] == rows[1]["fit_seconds"]  # one fit for both
    assert {r["accelerator"] for r in rows} == {"cpu, packed x2"}
    for r in rows:
        assert Path(r["checkpoint"]).name == f"seed{r['seed']}.ckpt"
        assert float(r["test_value"]) > 0 and float(r["best_val"]) > 0 and r["steps"] == "6"
    assert rows[0]["test_value"] != rows[1]["test_value"]
    monkeypatch.setattr(experiment, "spawn", lambda *a: pytest.fail("ran again"))
    assert main(argv) == 0


def test_the_slurm_array_runs_a_task_per_cell_and_gathers(tmp_path, monkeypatch):
    argv = tiny_grid(tmp_path, monkeypatch, "array", "--seeds", "0", "--max-time",
                     "00:04:00:00", "--slurm", "--sbatch", "time=04:10:00", "gres=gpu:1")
    assert main(argv) == 0
    script = (tmp_path / "runs" / "array" / "array.sbatch").read_text()
    lines = script.splitlines()
    assert lines[:6] == ["#!/bin/bash", "#SBATCH --job-name=array", "#SBATCH --array=0-1",
                         f"#SBATCH --output={tmp_path}/runs/array/slurm-%A_%a.out",
                         "#SBATCH --time=04:10:00", "#SBATCH --gres=gpu:1"]
    tasks = script.split('case "$SLURM_ARRAY_TASK_ID" in\n')[1].split("esac\n")[0]
    for k, norm in enumerate(["sepnorm", "sharenorm"]):
        task = tasks.split(f"{k})  # zinc_subset-{norm}-seed0\n")[1].split(";;")[0]
        fit, test = (line.strip() for line in task.strip().splitlines())
        assert fit.startswith('"$PYTHON" -m graphormer_sepnorm.cli fit --config ')
        assert f"--model.config.sepnorm {experiment.NORMS[norm]}" in fit
        assert "--trainer.logger.init_args.version fit --ckpt_path last" in fit
        assert fit.endswith("--trainer.max_time 00:04:00:00")
        assert test.startswith('"$PYTHON" -m graphormer_sepnorm.cli test --config ')
        assert test.endswith("--trainer.logger.init_args.version test --ckpt_path best")
    gather = lines[-1]
    assert gather.startswith('"$PYTHON" -m graphormer_sepnorm.experiment --gather --name array ')
    assert "--slurm" not in gather and "gres" not in gather
    assert "set -euo pipefail" in lines
    # the second task, run by bash as SLURM would: its fit, its test, the gathering
    env = {**os.environ, "SLURM_ARRAY_TASK_ID": "1"}
    done = subprocess.run(["bash", str(tmp_path / "runs" / "array" / "array.sbatch")],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = experiment.read_rows(tmp_path / "results" / "array.csv")
    assert [(r["norm"], r["steps"]) for r in rows] == [("sharenorm", "6")]
    assert "| zinc_subset | sharenorm | 0 | test/mae |" in (
        tmp_path / "results" / "array.md").read_text()
    assert main(argv) == 0  # written again: the one cell left
    assert "#SBATCH --array=0-0" in (tmp_path / "runs" / "array" / "array.sbatch").read_text()
