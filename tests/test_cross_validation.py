"""Cross-validation through the experiment grid: a row per fold, every metric's mean ± std, and
the fold models predicting as one ensemble with CV+ intervals."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tiny_data import SMILES, own_csv

from graphormer_sepnorm.experiment import main, parse_args
from graphormer_sepnorm.experiment_results import read_rows

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.fixture(scope="module")
def cv_grid(tmp_path_factory):
    """A 3-fold grid of the small-data recipe (a 2-layer model from scratch) on 45 molecules."""
    tmp = tmp_path_factory.mktemp("cv")
    data = own_csv(tmp / "own.csv", rows=45)
    args = ["--name", "cv", "--configs", str(CONFIGS / "smiles_csv.yaml"), "--norms",
            "sepnorm", "--seeds", "0", "--folds", "3", "--accelerator", "cpu", "--max-epochs",
            "2", "--results-dir", str(tmp / "results"), "--runs-dir", str(tmp / "runs"),
            "--extra", "--data.path", str(data), "--data.target_columns", "[logS]",
            "--model.init_from", "none", "--model.config.num_layers", "2",
            "--data.batch_size", "8", "--data.mol_features", "[morgan]",
            "--trainer.enable_model_summary", "false"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")
        assert main(args) == 0
    return tmp


def test_folds_need_three_and_no_packing():
    for bad in (["--folds", "2"], ["--folds", "3", "--packed"]):
        with pytest.raises(SystemExit):
            main(["--name", "x", "--configs", "a.yaml", *bad])
    args = parse_args(["--name", "x", "--configs", "a.yaml", "--folds", "4", "--seeds", "1"])
    assert (args.folds, args.fold_split) == (4, "scaffold")


def test_a_row_per_fold_and_every_metric_as_mean_and_std(cv_grid):
    rows = read_rows(cv_grid / "results" / "cv.csv")
    assert [(r["seed"], r["fold"]) for r in rows] == [("0", "0"), ("0", "1"), ("0", "2")]
    assert len({r["checkpoint"] for r in rows}) == 3
    values = [float(r["test_value"]) for r in rows]
    text = (cv_grid / "results" / "cv.md").read_text()
    mae = next(line for line in text.splitlines() if line.startswith("| test/mae |"))
    assert f"{np.mean(values):.4f} ± {np.std(values, ddof=1):.4f}" in mae
    assert "| test/rmse |" in text and "| test/mae_blend |" in text
    command = next(line for line in text.splitlines() if "graphormer-sepnorm-predict" in line)
    assert sorted(command.split("--checkpoint ")[1].split()) == sorted(
        r["checkpoint"] for r in rows)


def test_the_fold_models_predict_as_one_ensemble_with_cv_plus_intervals(cv_grid):
    from graphormer_sepnorm.predict import predict_smiles

    paths = sorted(r["checkpoint"] for r in read_rows(cv_grid / "results" / "cv.csv"))
    frame = predict_smiles(SMILES[:6], paths)
    members = [predict_smiles(SMILES[:6], p) for p in paths]
    np.testing.assert_allclose(frame["logS"], np.mean([m["logS"] for m in members], 0),
                               rtol=1e-6)
    assert {"logS_std", "logS_lo90", "logS_hi90"} <= set(frame)
    assert (frame["logS_lo90"] < frame["logS_hi90"]).all()
    assert isinstance(frame, pd.DataFrame) and (frame["error"] == "").all()
