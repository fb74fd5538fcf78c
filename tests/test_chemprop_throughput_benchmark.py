"""benchmarks/chemprop_throughput.py: its input file, commands and timing (chemprop not needed)."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import chemprop_throughput  # noqa: E402


def test_write_input_keeps_the_first_rows_as_a_smiles_csv(tmp_path):
    source = tmp_path / "list.txt"
    source.write_text("CCO\nc1ccccc1\nnot_a_smiles\nCCN\n")
    count = chemprop_throughput.write_input(source, 3, tmp_path / "in.csv")
    with open(tmp_path / "in.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert count == 3 and [r["smiles"] for r in rows] == ["CCO", "c1ccccc1", "not_a_smiles"]


def test_predict_is_told_the_featurizer_the_model_was_trained_with(tmp_path):
    def command(method):
        return chemprop_throughput.predict_command(Path("chemprop"), method, Path("m.pt"),
                                                   Path("in.csv"), Path("out.csv"), 2)

    assert "--molecule-featurizers" not in command("chemprop")
    assert command("chemprop_rdkit2d")[-2:] == ["--molecule-featurizers", "rdkit_2d"]
    # the normalized variant's --no-descriptor-scaling is training's, not prediction's
    assert command("chemprop_rdkit2d_norm")[-2:] == ["--molecule-featurizers",
                                                     "v1_rdkit_2d_normalized"]
    assert command("chemprop")[command("chemprop").index("--num-workers") + 1] == "2"


def test_timed_counts_the_children_cpu_and_memory(tmp_path):
    code = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'sum(range(10**6))'])"
    figures = chemprop_throughput.timed([sys.executable, "-c", code], tmp_path / "log")
    assert figures["seconds"] > 0 and figures["cpu_s"] > 0 and figures["peak_rss_mib"] > 1


def test_a_failing_command_raises(tmp_path):
    with pytest.raises(subprocess.CalledProcessError):
        chemprop_throughput.timed([sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "log")


def test_ours_is_the_prediction_command_with_its_defaults():
    command = chemprop_throughput.ours_command("m.ckpt", Path("in.csv"), Path("out.csv"))
    assert Path(command[0]).name == "graphormer-sepnorm-predict"
    assert command[1:] == ["in.csv", "-o", "out.csv", "--checkpoint", "m.ckpt", "--overwrite",
                           "--no-progress"]
    assert chemprop_throughput.pairs(["new=a=b.ckpt", "old=c"]) == {"new": "a=b.ckpt",
                                                                    "old": "c"}
