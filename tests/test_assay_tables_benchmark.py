"""benchmarks/assay_tables.py and assay_sets.py read, split and score as the package does.

chemprop is not installed here (its own venv); the reading of its prediction files, the scoring
of both sides with the package's metrics and the sets' split column are tested on hand-built
tables in the formats chemprop 2.3.1 and ``assay_sets.py`` write.
"""

import math
import sys
from pathlib import Path

import pytest
import torch
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import assay_sets  # noqa: E402
import assay_tables  # noqa: E402
import cv_plus  # noqa: E402


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_read_table_keeps_empty_cells_missing(tmp_path):
    data = _write(tmp_path / "set.csv", "smiles,a,b,split\nC,1,,train\nCC,,0,test\n")
    labels, smiles, y, split = assay_tables.read_table(data)
    assert labels == ["a", "b"] and smiles == ["C", "CC"] and split == ["train", "test"]
    assert y[0, 0] == 1.0 and math.isnan(y[0, 1]) and math.isnan(y[1, 0]) and y[1, 1] == 0.0


def test_binary_predictions_score_each_label_on_its_labelled_molecules(tmp_path):
    run = tmp_path / "run"
    _write(run / "model_0" / "test_predictions.csv",
           "smiles,a,b\nC,0.9,0.2\nCC,0.1,0.7\nCCC,0.8,0.6\nCCCC,0.3,0.1\n")
    smiles = ["C", "CC", "CCC", "CCCC"]
    out = assay_tables.chemprop_outputs(run, ["a", "b"], smiles, "binary")
    assert torch.sigmoid(out)[0].tolist() == pytest.approx([0.9, 0.2], abs=1e-12)
    y = torch.tensor([[1.0, math.nan], [0.0, 1.0], [0.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    metrics = assay_tables.score("binary", ["a", "b"], out, y)
    # a: all four labelled; b: the first molecule's cell is empty and left out
    auc_a = roc_auc_score([1, 0, 0, 1], [0.9, 0.1, 0.8, 0.3])
    auc_b = roc_auc_score([1, 0, 0], [0.7, 0.6, 0.1])
    assert metrics["roc_auc"] == pytest.approx((auc_a + auc_b) / 2, abs=1e-6)
    with pytest.raises(RuntimeError, match="file order"):
        assay_tables.chemprop_outputs(run, ["a", "b"], smiles[::-1], "binary")


def test_multiclass_predictions_read_the_prob_column(tmp_path):
    run = tmp_path / "run"
    _write(run / "model_0" / "test_predictions.csv",
           'smiles,activity,activity_prob\nC,0,"0.7,0.2,0.1"\nCC,2,"0.1,0.3,0.6"\n'
           'CCC,1,"0.2,0.5,0.3"\n')
    out = assay_tables.chemprop_outputs(run, ["activity"], ["C", "CC", "CCC"], "multiclass")
    assert out.exp().flatten().tolist() == pytest.approx([0.7, 0.2, 0.1, 0.1, 0.3, 0.6,
                                                          0.2, 0.5, 0.3], abs=1e-12)
    metrics = assay_tables.score("multiclass", ["activity"], out,
                                 torch.tensor([[0.0], [2.0], [1.0]], dtype=torch.float64))
    assert metrics["accuracy"] == pytest.approx(1.0) and metrics["roc_auc"] == pytest.approx(1.0)


def test_the_summary_gives_mean_and_std_per_method_and_label():
    rows = [{"set": "tox21", "method": "ours", "seed": str(s), "test_roc_auc": str(v),
             "test_pr_auc": "0.4", "test_accuracy": "", "test_f1": "", "minutes": "2",
             "cpu_minutes": "1", "test_roc_auc_per_label": f'{{"a": {v}, "b": 0.5}}'}
            for s, v in ((0, 0.7), (1, 0.8))]
    table = assay_tables.summary(rows)
    assert "| ours | 0,1 | 0.750 ± 0.071 | 0.400 ± 0.000 | 2.0 (1.0) |" in table
    assert "| a | 0.750 ± 0.071 |" in table and "| b | 0.500 ± 0.000 |" in table


def test_the_split_column_keeps_scaffolds_together():
    smiles = ["c1ccccc1C", "c1ccccc1CC", "C1CCCCC1O", "C1CCCCC1N", "CCO", "CCN", "CCC",
              "c1ccncc1", "O=C1CCCN1", "C1CC1"]
    split = assay_sets.split_column(smiles)
    assert sorted(set(split)) == ["test", "train", "val"]
    assert split[0] == split[1] and split[2] == split[3]  # benzene, cyclohexane scaffolds
    assert split.count("train") >= 7


def test_cv_plus_scores_coverage_width_and_mae_of_the_predicted_rows(tmp_path):
    test = _write(tmp_path / "test.csv", "smiles,y\nC,1.0\nCC,2.0\nCCC,5.0\n")
    with_input = _write(tmp_path / "with_input.csv", "smiles,y,y_pred,y_lo90,y_hi90,error\n"
                        "C,1.0,1.5,0,2,\nCC,2.0,2.0,1,3,\nCCC,5.0,3.0,2,4,\n")
    assert [v.tolist() for v in cv_plus.read_predictions(with_input, test, "y")] == [
        [1.0, 2.0, 5.0], [1.5, 2.0, 3.0], [0.0, 1.0, 2.0], [2.0, 3.0, 4.0]]
    preds = _write(tmp_path / "preds.csv", "smiles,y,y_std,y_lo90,y_hi90,error\n"
                   "C,1.5,0.1,0.0,2.0,\nCC,2.0,0.1,1.0,3.0,\nCCC,3.0,0.1,2.0,4.0,\n")
    y, mean, lo, hi = cv_plus.read_predictions(preds, test, "y")
    assert cv_plus.interval_scores(y, mean, lo, hi) == {
        "test_mae": pytest.approx(2.5 / 3), "coverage90": pytest.approx(2 / 3),
        "mean_width": pytest.approx(2.0)}
    _write(preds, "smiles,y,y_std,y_lo90,y_hi90,error\nC,,,,,unparsable\nCC,2,0,1,3,\n"
           "CCC,3,0,2,4,\n")
    with pytest.raises(RuntimeError, match="not every test row"):
        cv_plus.read_predictions(preds, test, "y")
