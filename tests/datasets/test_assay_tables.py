"""Real assay tables: sparse labels, several assays, multiclass labels, the table's descriptors.

Tables are written in the real CSV format; fits run the small-data recipe on a 2-layer model.
"""

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_data import SMILES

from graphormer_sepnorm.cli import main, run
from graphormer_sepnorm.datasets import SmilesCSVDataModule
from graphormer_sepnorm.datasets.base import DataError
from graphormer_sepnorm.datasets.splits import fold_split, murcko_scaffold
from graphormer_sepnorm.predict import predict_smiles

TINY = ["--model.config.num_layers", "2", "--model.init_from", "none", "--data.batch_size", "8",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        "--data.mol_features", "[]", "--model.config.head_hidden_dim", "16"]


@pytest.fixture(autouse=True)
def _in_tmp(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "argv", ["graphormer-sepnorm"])
    monkeypatch.chdir(tmp_path)


def table(path: str, header: list[str], rows: list[list]) -> str:
    lines = [",".join(header)] + [",".join(str(v) for v in row) for row in rows]
    Path(path).write_text("\n".join(lines) + "\n")
    return path


def sparse_binary(path: str = "assays.csv") -> str:
    """Two assays over the tiny SMILES, a third of each assay's cells empty, a split column."""
    rows = []
    for i, s in enumerate(SMILES):
        a = "" if i % 3 == 0 else (i // 2) % 2
        b = "" if i % 3 == 1 else (i % 4 > 1) * 1
        rows.append([s, a, b, ("train", "train", "train", "val", "test")[i % 5]])
    return table(path, ["smiles", "assay_a", "assay_b", "split"], rows)


def fit(*args: str):
    return main(["fit", "--config", "smiles_csv", *args, "--trainer.max_epochs", "2",
                 "--test_best", "false", *TINY])


def test_a_sparse_multi_assay_binary_table_fits_and_scores_each_assay(capsys):
    cli = fit("--data.path", sparse_binary(), "--data.target_columns", "[assay_a, assay_b]",
              "--data.task", "binary")
    out = capsys.readouterr().out
    # the split column is used because it is there, and the fit says so, with its sizes
    assert "split column 'split': train " in out and "training labels: assay_a " in out
    metrics = cli.trainer.callback_metrics
    assert {"val/roc_auc", "val/roc_auc_assay_a", "val/roc_auc_assay_b", "val/pr_auc_assay_a",
            "val/loss"} <= set(metrics)
    values = [float(metrics[f"val/roc_auc_assay_{k}"]) for k in "ab"]
    defined = [v for v in values if not math.isnan(v)]
    assert float(metrics["val/roc_auc"]) == pytest.approx(sum(defined) / len(defined))
    assert cli.trainer.checkpoint_callback.monitor == "val/roc_auc"
    frame = predict_smiles(SMILES[:5], cli.trainer.checkpoint_callback.best_model_path)
    # every assay for every molecule, labelled or not
    assert list(frame.columns) == ["smiles", "assay_a_probability", "assay_b_probability",
                                   "error"]
    assert frame[["assay_a_probability", "assay_b_probability"]].notna().all().all()


def test_rows_without_any_label_are_left_out_and_reported_by_line():
    rows = [[s, "" if i == 2 else i % 2, "" if i in (2, 5) else 1 - i % 2]
            for i, s in enumerate(SMILES)]
    path = table("a.csv", ["smiles", "a", "b"], rows)
    data = SmilesCSVDataModule(path, ["a", "b"], task="binary", split="random",
                               split_sizes=(1.0, 0.0, 0.0))
    with pytest.warns(UserWarning, match=r"1 row\(s\) have no label in any of \['a', 'b'\] .*"
                                         r"\n  line 4"):
        splits = data.load_splits()
    assert len(splits["train"]) == len(SMILES) - 1
    assert int(torch.cat([g.y for g in splits["train"]]).isnan().sum()) == 1  # line 7's b


def test_a_label_column_without_training_labels_is_named():
    rows = [[s, i % 2, "" if split == "train" else 1, split]
            for i, (s, split) in enumerate(zip(SMILES, ["train", "val", "test", "train"] * 5,
                                               strict=False))]
    path = table("a.csv", ["smiles", "a", "b", "split"], rows)
    with pytest.raises(DataError, match=r"no label in the training split for column\(s\) \['b'\]"):
        SmilesCSVDataModule(path, ["a", "b"], task="binary").load_splits()


def test_multiclass_labels_must_be_class_indices_listed_by_line():
    rows = [[s, (0, 1, 2.0, "1.5", -1, 3)[i % 6]] for i, s in enumerate(SMILES[:6])]
    path = table("m.csv", ["smiles", "kind"], rows)
    data = SmilesCSVDataModule(path, "kind", task="multiclass", num_classes=3)
    with pytest.raises(DataError) as info:
        data.load_splits()
    message = str(info.value)
    assert "line 5: column 'kind' = '1.5': multiclass labels must be class indices" in message
    assert "line 6: column 'kind' = '-1'" in message
    assert "line 7: column 'kind' = '3': out of range for num_classes 3 (labels 0..2)" in message
    assert "line 4" not in message  # 2.0 is class 2


def test_a_multiclass_fit_predicts_probabilities_summing_to_one():
    rows = [[s, i % 3, "" if i % 4 == 0 else (i + 1) % 3] for i, s in enumerate(SMILES)]
    path = table("m.csv", ["smiles", "kind", "grade"], rows)
    cli = fit("--data.path", path, "--data.target_columns", "[kind, grade]", "--data.task",
              "multiclass", "--data.split", "random")
    assert cli.model.hparams["dataset_info"]["num_classes"] == 3  # the largest label + 1
    assert cli.model.config.num_tasks == 6
    assert {"val/roc_auc", "val/accuracy", "val/f1", "val/f1_grade"} <= set(
        cli.trainer.callback_metrics)
    frame = predict_smiles(SMILES[:4], cli.trainer.checkpoint_callback.best_model_path)
    kinds = [f"kind_class{k}_probability" for k in range(3)]
    assert kinds[0] in frame and "grade_class2_probability" in frame
    np.testing.assert_allclose(frame[kinds].sum(1), 1.0, rtol=1e-5)


def test_descriptor_columns_are_standardized_by_the_model_with_training_statistics():
    gen = np.random.default_rng(0)
    logp = gen.normal(3.0, 2.0, len(SMILES)).round(3)
    rows = [[s, f"{v:.3f}", 1000 + 10 * i, i % 5] for i, (s, v) in enumerate(zip(SMILES, logp,
                                                                                   strict=True))]
    path = table("d.csv", ["smiles", "clogp", "mw", "y"], rows)
    cli = fit("--data.path", path, "--data.target_columns", "[y]", "--data.split", "random",
              "--data.feature_columns", "[clogp, mw]")
    info = cli.model.dataset_info
    assert info["feature_columns"] == ["clogp", "mw"] and info["mol_feature_dim"] == 2
    train = cli.datamodule.splits["train"]
    x = torch.cat([g.mol_x for g in train])
    torch.testing.assert_close(cli.model.model.feature_mean, x.mean(0))
    torch.testing.assert_close(cli.model.model.feature_std, x.std(0))
    bad = table("bad.csv", ["smiles", "clogp", "mw", "y"], [["CCO", "", 46, 1],
                                                            ["CCN", "x", 45, 2]])
    with pytest.raises(DataError, match="line 2: feature column 'clogp' = '' is not a finite"):
        SmilesCSVDataModule(bad, "y", feature_columns=["clogp", "mw"]).load_splits()


def test_folds_test_every_molecule_once_and_keep_scaffolds_together():
    scaffolds = [murcko_scaffold(s) for s in SMILES]
    for groups in (None, scaffolds):
        tested = []
        for fold in range(4):
            train, val, test = fold_split(len(SMILES), 4, fold, seed=1, scaffolds=groups)
            assert sorted(train + val + test) == list(range(len(SMILES)))
            tested += test
            if groups is not None:
                assert not {groups[i] for i in test} & {groups[i] for i in train + val}
        assert sorted(tested) == list(range(len(SMILES)))
    with pytest.raises(ValueError, match="at least 3"):
        fold_split(10, 2, 0, 0)


def test_a_data_error_prints_without_a_traceback_and_leaves_no_run_folder(capsys,
                                                                          monkeypatch):
    path = table("b.csv", ["smiles", "active"], [[s, i % 3] for i, s in enumerate(SMILES)])
    monkeypatch.setattr(sys, "argv", ["graphormer-sepnorm", "fit", "--config", "smiles_csv",
                                      "--data.path", path, "--data.target_columns", "[active]",
                                      "--data.task", "binary", *TINY])
    with pytest.raises(SystemExit) as exit_:
        run()
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "graphormer-sepnorm fit: error: b.csv: " in err and "Traceback" not in err
    assert "line 4: column 'active' = '2': binary labels must be 0 or 1" in err
    assert not Path("runs").exists() or not any(Path("runs").rglob("version_*"))
