"""benchmarks/gpu_roofline.py counts a tiny packed step on the CPU and prints its summary line."""

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gpu_roofline  # noqa: E402


def test_gpu_roofline_smoke_run_prints_the_summary_line(capsys):
    rows = gpu_roofline.main(["--synthetic", "32", "--batch-scale", "0.03", "--layers", "1",
                              "--k", "2", "--no-engine"])
    assert [(r["dataset"], r["path"]) for r in rows] == [("zinc_subset", "packed 2"),
                                                         ("molhiv", "packed 2")]
    for row in rows:
        assert row["graph_launches"] > 0 and row["bytes"] > 0 and row["flops"] > 0
        assert row["launches"] == row["graph_launches"] + row["eager_launches"]
        assert row["recompiles"] == 0  # the second step runs what the first compiled
        step_ms = max(row["launches_ms"], row["bytes_ms"], row["flops_ms"])
        assert row["model_steps_per_s"] == pytest.approx(2 / step_ms * 1e3, rel=1e-12)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert re.fullmatch(r"gpu_roofline launches_k2=\d+ launches_k8=n/a table_min=[\d.]+ "
                        r"molhiv_min=[\d.]+", last), last
