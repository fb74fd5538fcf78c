"""benchmarks/gpu_step.py runs on the CPU at a small size and ends with its summary line."""

import re
import sys
from pathlib import Path

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
               for r in rows)
    report = (tmp_path / "step_profiles.txt").read_text()
    assert report.count("## zinc_subset ") == 2 and "(2 steps)" in report
    assert "per step:" in report and "aten::" in report
    assert "graph(s) compiled" in capsys.readouterr().out
