"""benchmarks/gpu_step.py runs on the CPU at a small size and ends with its summary line."""

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gpu_step  # noqa: E402


def test_gpu_step_smoke_run_prints_the_summary_line(capsys):
    rows = gpu_step.main(["--synthetic", "40", "--steps", "2", "--warmup", "1",
                          "--batch-scale", "0.04", "--layers", "2", "--hops", "5",
                          "--k", "1", "2", "--datasets", "zinc_subset"])
    assert [r["path"] for r in rows] == ["lightning", "engine", "packed 1", "packed 2"]
    assert all(r["steps_per_s"] > 0 and r["tflops"] > 0 for r in rows)
    packed = rows[-1]
    assert packed["model_steps_per_s"] == packed["steps_per_s"] * 2
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert re.fullmatch(r"gpu_step device=\S+ steps_per_s=[\d.]+ packed_k=\d+ "
                        r"model_steps_per_s=[\d.]+ full_recipe_min=[\d.]+", last), last


def test_gpu_step_profiles_the_steps_after_the_timed_ones(tmp_path, capsys):
    rows = gpu_step.main(["--synthetic", "40", "--steps", "2", "--warmup", "1",
                          "--batch-scale", "0.04", "--layers", "2", "--hops", "5",
                          "--k", "2", "--datasets", "zinc_subset", "--paths", "engine", "packed",
                          "--profile-dir", str(tmp_path), "--profile-steps", "2"])
    assert [r["path"] for r in rows] == ["engine", "packed 2"]
    assert all(0 < r["host_ms"] <= r["step_ms"] * 1.5 and r["timed_graphs"] >= 0
               and 0 < r["steady_ms"] <= r["step_ms"] * 1.5 and r["timed_new_lengths"] >= 0
               for r in rows)
    report = (tmp_path / "step_profiles.txt").read_text()
    assert report.count("## zinc_subset ") == 2 and "(2 steps)" in report
    assert "per step:" in report and "aten::" in report
    assert "graph(s) compiled" in capsys.readouterr().out


def test_steady_seconds_leave_out_the_steps_that_compiled():
    timer = gpu_step.StepTimer(warmup=0, steps=4)
    timer.host, timer.seconds = [0.01, 0.01, 2.0, 0.012], 2.05
    assert timer.steady_seconds() == pytest.approx(0.05 / 3)
    timer.host = [0.01, 0.011, 0.012, 0.013]  # none slow: the plain mean
    assert timer.steady_seconds() == pytest.approx(2.05 / 4)


def test_gpu_step_pads_as_the_preset_does():
    """The preset's ``train_length: longest``: the timed steps meet no new padded length (each
    would be a compile on a GPU)."""
    assert gpu_step.preset_train_length() == "longest"
    rows = gpu_step.main(["--synthetic", "60", "--steps", "4", "--warmup", "1",
                          "--batch-scale", "0.04", "--layers", "1", "--hops", "5",
                          "--k", "2", "--datasets", "molhiv", "--paths", "packed"])
    assert rows[0]["timed_new_lengths"] == 0


def test_gpu_step_times_grid_and_rows_one_after_the_other():
    """``--train-tokens grid rows`` (a lease's comparison of the two on one machine): each
    engine and packed row for each, named by it; the preset's default is sequences."""
    assert gpu_step.preset_train_tokens() == "sequences"
    rows = gpu_step.main(["--synthetic", "40", "--steps", "2", "--warmup", "1",
                          "--batch-scale", "0.04", "--layers", "1", "--hops", "5",
                          "--k", "2", "--datasets", "zinc_subset", "--paths", "engine", "packed",
                          "--train-tokens", "grid", "rows"])
    assert [(r["path"], r["train_tokens"]) for r in rows] == [
        ("engine grid", "grid"), ("engine rows", "rows"),
        ("packed 2 grid", "grid"), ("packed 2 rows", "rows")]
    assert all(r["steps_per_s"] > 0 for r in rows)
