"""The experiment runner: aggregation on a hand-made CSV, and a real 2-run grid on tiny data."""

import csv
import re
from pathlib import Path

import pytest
from tiny_data import write_zinc_raw

from graphormer_sepnorm import experiment
from graphormer_sepnorm.experiment import FIELDS, budget_args, main, mean_std, parse_args

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


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


def test_budget_arguments():
    args = parse_args(["--name", "x", "--configs", "a.yaml", "--max-steps", "50"])
    assert budget_args(args) == ["--trainer.max_steps", "50", "--model.total_steps", "50"]
    args = parse_args(["--name", "x", "--configs", "a.yaml", "--max-epochs", "3",
                       "--max-time", "00:00:10:00", "--extra", "--model.lr", "1e-3"])
    assert budget_args(args) == ["--trainer.max_epochs", "3", "--model.total_steps", "null",
                                 "--trainer.max_steps", "-1", "--trainer.max_time", "00:00:10:00"]
    assert args.extra == ["--model.lr", "1e-3"] and args.seeds == [0]
    assert args.norms == ["sepnorm", "sharenorm"]


def tiny_grid(tmp_path, monkeypatch, name: str, *options: str) -> list[str]:
    """A ZINC-subset grid command on tiny data and a tiny model: 12 training graphs in batches
    of 4, so 6 steps are 2 epochs, validated after each."""
    write_zinc_raw(tmp_path / "mirror" / "ZINC" / "raw")
    monkeypatch.setenv("GRAPHORMER_SEPNORM_DATA_MIRROR", str(tmp_path / "mirror"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return ["--name", name, "--configs", str(CONFIGS / "zinc_subset.yaml"), *options,
            "--accelerator", "cpu", "--max-steps", "6", "--results-dir",
            str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs"), "--extra",
            "--model.config.num_layers", "2", "--model.config.hidden_dim", "16",
            "--model.config.ffn_dim", "16", "--model.config.num_heads", "4",
            "--model.warmup_steps", "1", "--data.batch_size", "4",
            "--data.root", str(tmp_path / "data"), "--trainer.enable_model_summary", "false"]


def test_two_run_grid_on_tiny_data(tmp_path, monkeypatch):
    argv = tiny_grid(tmp_path, monkeypatch, "tiny", "--seeds", "3")
    assert main(argv) == 0
    with open(tmp_path / "results" / "tiny.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["dataset"], r["norm"], r["seed"]) for r in rows] == [
        ("zinc_subset", "sepnorm", "3"), ("zinc_subset", "sharenorm", "3")]
    for r in rows:
        assert list(r) == FIELDS
        assert r["monitor"] == "val/mae" and r["test_metric"] == "test/mae"
        assert r["steps"] == "6" and float(r["test_value"]) > 0 and float(r["best_val"]) > 0
        assert Path(r["checkpoint"]).is_file() and Path(r["checkpoint"]).name.startswith("best-")
        assert float(r["fit_seconds"]) > 0 and int(r["peak_rss_mb"]) > 100
    run = tmp_path / "runs" / "tiny" / "zinc_subset-sharenorm-seed3"
    assert "sepnorm: false" in (run / "fit" / "config.yaml").read_text()
    assert "seed_everything: 3" in (run / "fit" / "config.yaml").read_text()

    md = (tmp_path / "results" / "tiny.md").read_text()
    v = {r["norm"]: f"{float(r['test_value']):.4f}" for r in rows}
    assert f"| zinc_subset | sepnorm | 3 | test/mae | {v['sepnorm']} |" in md
    assert f"| zinc_subset | sharenorm | 3 | test/mae | {v['sharenorm']} |" in md
    assert re.search(r"- Hardware: CPU: .+, \d+ cores; GPU: ", md)
    assert "- Budget: the configs' schedules; max_steps=6" in md
    assert re.search(r"- Commit: [0-9a-f]{40}(-dirty)?\n", md)
    assert re.search(r"- Date: \d{4}-\d\d-\d\d \d\d:\d\d UTC", md)

    # resumable: a second call finds both runs in the CSV and starts none
    monkeypatch.setattr(experiment, "spawn", lambda *a: pytest.fail("ran again"))
    assert main(argv) == 0
    assert experiment.read_rows(tmp_path / "results" / "tiny.csv") == rows


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
    assert main(argv) == 0  # resumable
