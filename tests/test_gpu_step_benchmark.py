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
