"""benchmarks/chemprop_uncertainty.py calibrates and scores deviations as the package does.

chemprop itself is not installed here (its own venv); the calibration, the scores, the reading
of its predictions and the table are tested on hand-built numbers.
"""

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import chemprop_uncertainty  # noqa: E402
import small_sets  # noqa: E402


def test_scores_calibrate_on_validation_and_score_test():
    # validation normalized errors 1..10: the split-conformal scale is the 10th smallest, 10;
    # deviations falling where errors grow
    i = np.arange(1.0, 11.0)
    val = (np.zeros(10), 1 / np.sqrt(i), np.sqrt(i))
    std = np.array([1.0, 2.0, 3.0, 4.0])
    y = np.array([1.0, 3.0, 2.0, 50.0])
    out = chemprop_uncertainty.scores(val, (np.zeros(4), std, y))
    assert out["scale"] == pytest.approx(10.0, rel=1e-12)
    # mean ± 1.645 * (10 std / 1.645): half-widths 10, 20, 30, 40; the error 50 falls outside
    assert out["coverage90"] == 0.75
    assert out["test_mae"] == 14.0
    sigma = 10 * std / 1.6448536269514722
    nll = np.mean(0.5 * np.log(2 * math.pi * sigma**2) + y**2 / (2 * sigma**2))
    assert out["nll"] == pytest.approx(nll, rel=1e-12)
    # ranks of std 0, 1, 2, 3 against errors' 0, 2, 1, 3: 1 - 6 * 2 / (4 * 15)
    assert out["std_error_spearman"] == pytest.approx(0.8, rel=1e-12)
    assert out["val_spearman"] == pytest.approx(-1.0, rel=1e-12)


def test_predicted_reads_the_variance_root_and_checks_the_order(tmp_path):
    path = tmp_path / "preds.csv"
    path.write_text("smiles,y,y_unc\nCCO,1.5,4.0\nCCN,-2.0,0.25\n")
    mean, std = chemprop_uncertainty.predicted(path, [("CCO", 1.0), ("CCN", 0.0)])
    assert mean.tolist() == [1.5, -2.0] and std.tolist() == [2.0, 0.5]
    with pytest.raises(RuntimeError, match="file order"):
        chemprop_uncertainty.predicted(path, [("CCN", 0.0), ("CCO", 1.0)])


def test_split_files_keep_each_split_in_file_order(tmp_path):
    data = tmp_path / "set.csv"
    data.write_text("smiles,y,split\nC,1,train\nCC,2,test\nCCC,3,val\nCCO,4.5,test\n")
    splits = chemprop_uncertainty.split_files(data, tmp_path)
    assert splits == {"val": [("CCC", 3.0)], "test": [("CC", 2.0), ("CCO", 4.5)]}
    assert (tmp_path / "test.csv").read_text().splitlines() == ["smiles,y", "CC,2.0", "CCO,4.5"]
    assert (tmp_path / "val.csv").read_text().splitlines() == ["smiles,y", "CCC,3.0"]


def test_children_run_on_one_thread_of_every_library(tmp_path):
    code = ("import os; print(' '.join(os.environ[n] for n in ('OMP_NUM_THREADS', "
            "'MKL_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'NUMEXPR_NUM_THREADS')))")
    with open(tmp_path / "log", "w") as log:
        seconds = chemprop_uncertainty.cpu_seconds([sys.executable, "-c", code], log)
    assert seconds >= 0 and (tmp_path / "log").read_text().strip() == "1 1 1 1"


def test_table_gives_mean_and_std_over_seeds_in_the_sets_order():
    def row(name, seed, mae):
        return {"set": name, "method": "chemprop_mve", "seed": str(seed), "test_mae": str(mae),
                "coverage90": "0.9", "nll": "1.0", "std_error_spearman": "0.2",
                "val_spearman": "0.1", "cpu_min": "2.0"}

    text = chemprop_uncertainty.table([row("freesolv", 1, 0.6), row("solubility", 0, 0.5),
                                       row("freesolv", 0, 0.4)])
    lines = text.splitlines()
    assert lines[2].startswith("| solubility | chemprop_mve | 0 | 0.500 ± 0.000 |")
    assert lines[3].startswith("| freesolv | chemprop_mve | 0,1 | 0.500 ± 0.100 | 0.900 ± 0.000")
    assert lines[3].endswith("| 2.0 |")


def test_split_seed_draws_other_ties_and_labels_every_molecule():
    # six single-molecule scaffolds: only the order of ties decides which go to test
    rows = [(smiles, float(i)) for i, smiles in enumerate(
        ["c1ccccc1", "C1CCCCC1", "c1ccncc1", "C1CCNCC1", "c1ccoc1", "C1CCOC1"])]
    splits = {seed: small_sets.with_scaffold_split(rows, (0.5, 0.25, 0.25), split_seed=seed)
              for seed in range(4)}
    for labelled in splits.values():
        assert sorted(k for _, _, k in labelled) == ["test"] * 2 + ["train"] * 3 + ["val"]
    assert len({tuple(k for _, _, k in labelled) for labelled in splits.values()}) > 1
    assert splits[0] == small_sets.with_scaffold_split(rows, (0.5, 0.25, 0.25))
