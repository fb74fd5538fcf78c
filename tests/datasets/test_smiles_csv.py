"""SmilesCSVDataModule on small CSV files written by the tests, and one CLI fit through it."""

from __future__ import annotations

import csv
import gzip
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_data import SMILES

from graphormer_sepnorm.checkpoints import FORMAT_KEY
from graphormer_sepnorm.chem.featurizers import featurizer_from_config
from graphormer_sepnorm.convert import convert_file
from graphormer_sepnorm.datasets import SmilesCSVDataModule
from graphormer_sepnorm.datasets.base import DataError
from graphormer_sepnorm.datasets.splits import murcko_scaffold, scaffold_split

CONFIG = Path(__file__).parents[2] / "configs" / "smiles_csv.yaml"


def write_csv(path: Path, header: list[str], rows: list[list], delimiter: str = ",") -> Path:
    """Writes rows with the csv module (fields with commas are quoted), gzipped for ``.gz``."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", newline="") as f:
        writer = csv.writer(f, delimiter=delimiter)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def indexed_csv(path: Path, smiles: list[str] = SMILES) -> Path:
    """``name, smiles, y`` with ``y`` = row index, so each graph tells which row it came from."""
    rows = [[f"mol {i}, batch A", s, i] for i, s in enumerate(smiles)]
    return write_csv(path, ["name", "smiles", "y"], rows)


def rows_of(graphs: list) -> list[int]:
    """Row indices of graphs made by :func:`indexed_csv`."""
    return sorted(int(g.y[0, 0]) for g in graphs)


def load(path: Path, **kwargs) -> dict[str, list]:
    """The splits of a datamodule on ``path`` (target column ``y`` unless given)."""
    kwargs.setdefault("target_columns", ["y"])
    return SmilesCSVDataModule(str(path), **kwargs).load_splits()


def fit_small(tmp_path: Path, *extra: str):
    """``fit`` of smiles_csv.yaml on :func:`indexed_csv` with Morgan features, a 2-layer model
    from scratch, 8 molecules a batch, no test; ``extra`` appended."""
    from graphormer_sepnorm.cli import main

    path = tmp_path / "train.csv"
    if not path.exists():
        indexed_csv(path)
    return main(["fit", "--config", str(CONFIG), "--data.path", str(path),
                 "--data.target_columns", "[y]", "--data.root", str(tmp_path),
                 "--data.mol_features", "[morgan]", "--data.batch_size", "8",
                 "--model.init_from", "none", "--model.config.num_layers", "2",
                 "--test_best", "false", "--trainer.default_root_dir", str(tmp_path),
                 "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), *extra])


def test_quoted_fields_and_targets(tmp_path):
    text = 'name,smiles,y\n"ethanol, absolute",CCO,1.5\n"phenol, ""pure""",c1ccccc1O,-2\n'
    (tmp_path / "q.csv").write_text(text)
    with pytest.warns(UserWarning, match="the test split is empty"):
        splits = load(tmp_path / "q.csv", split="random", split_sizes=(1.0, 0.0, 0.0))
    train = splits["train"]
    assert sorted(g.y.item() for g in train) == [-2.0, 1.5]
    assert all(g.y.shape == (1, 1) and g.y.dtype == torch.float32 for g in train)
    assert sorted(g.num_nodes for g in train) == [3, 7]


def test_invalid_smiles_reported_with_line_numbers(tmp_path):
    # Header is line 1; rows 2..; a quoted field spanning two lines shifts later rows by one.
    text = 'name,smiles,y\na,CCO,1\n"two\nlines",CCN,2\nb,C1CC,3\nc,c1ccccc1,4\nd,,5\n'
    (tmp_path / "bad.csv").write_text(text)
    with pytest.raises(ValueError) as info:
        load(tmp_path / "bad.csv")
    message = str(info.value)
    assert "line 5: 'C1CC': invalid SMILES: unclosed ring" in message
    assert "line 7: '': empty SMILES" in message
    assert "2 of 5 SMILES" in message and "header as line 1" in message
    assert "bad.csv" in message and "on_invalid='skip'" in message


def test_invalid_smiles_skipped_with_warning(tmp_path):
    smiles = [*SMILES[:10], "C1CC", "not a smiles", *SMILES[10:]]
    with pytest.warns(UserWarning, match=r"line 13: 'not a smiles'") as record:
        splits = load(indexed_csv(tmp_path / "s.csv", smiles), on_invalid="skip",
                      split="random")
    assert "line 12: 'C1CC'" in str(record[0].message)
    kept = sorted(sum((rows_of(graphs) for graphs in splits.values()), []))
    assert kept == [i for i in range(len(smiles)) if i not in (10, 11)]


def test_too_many_invalid_rows_are_summarized(tmp_path):
    path = indexed_csv(tmp_path / "many.csv", ["C1CC"] * 15 + SMILES)
    with pytest.raises(ValueError, match=r"line 11: .*\n  \.\.\. and 5 more"):
        load(path)


@pytest.mark.parametrize(("value", "reason"), [
    ("abc", "column 'y' = 'abc' is not a finite number"),
    ("inf", "column 'y' = 'inf' is not a finite number"),
])
def test_bad_target_rejected(tmp_path, value, reason):
    path = write_csv(tmp_path / "t.csv", ["smiles", "y"], [["CCO", 1], ["CCN", value]])
    with pytest.raises(DataError, match="data rows") as info:
        load(path)
    assert f"line 3: {reason}" in str(info.value)


@pytest.mark.parametrize("value", ["", "nan", "NA"])
def test_an_empty_label_is_missing_and_its_row_left_out_with_its_line(tmp_path, value):
    rows = [["CCO", 1], ["CCN", value], ["CCC", 2]]
    path = write_csv(tmp_path / "t.csv", ["smiles", "y"], rows)
    with pytest.warns(UserWarning, match=r"1 row\(s\) have no label .*\n  line 3"):
        splits = load(path, split="random", split_sizes=(1.0, 0.0, 0.0))
    assert sorted(float(g.y) for g in splits["train"]) == [1.0, 2.0]


def test_short_row_means_missing_target(tmp_path):
    (tmp_path / "short.csv").write_text("smiles,y\nCCO,1\nCCN\nCCC,3\n")
    with pytest.warns(UserWarning, match="line 3"):
        load(tmp_path / "short.csv", split="random", split_sizes=(1.0, 0.0, 0.0))


def test_missing_column_lists_available(tmp_path):
    path = indexed_csv(tmp_path / "c.csv")
    with pytest.raises(ValueError, match=r"no column 'logS'; the header has \['name', 'smiles'"):
        load(path, target_columns=["logS"])
    with pytest.raises(ValueError, match="no column 'SMILES'"):
        load(path, smiles_column="SMILES")


def test_missing_file_says_which_option(tmp_path):
    with pytest.raises(DataError, match="--data.path"):
        load(tmp_path / "absent.csv")


def test_scaffold_split_keeps_scaffolds_together_and_is_deterministic(tmp_path):
    benzenes = ["c1ccccc1O", "c1ccccc1N", "Cc1ccccc1", "c1ccccc1Cl", "CCc1ccccc1", "c1ccccc1Br"]
    pyridines = ["c1ccncc1", "Cc1ccncc1", "Nc1ccncc1"]
    others = ["C1CCCCC1O", "CCO", "CCCN", "C1CCOC1", "c1ccc2ccccc2c1", "C1CC1C", "OC1CCNCC1"]
    smiles = benzenes + others[:3] + pyridines + others[3:]
    path = indexed_csv(tmp_path / "scaf.csv", smiles)
    first = load(path, split_sizes=(0.4, 0.3, 0.3))
    assert {k: rows_of(v) for k, v in first.items()} == {
        k: rows_of(v) for k, v in load(path, split_sizes=(0.4, 0.3, 0.3)).items()}
    scaffolds = [murcko_scaffold(s) for s in smiles]
    where = {}
    for name, graphs in first.items():
        for row in rows_of(graphs):
            where.setdefault(scaffolds[row], set()).add(name)
    assert all(len(names) == 1 for names in where.values())
    # 16 molecules, train up to 6.4, val up to 11.2: benzene (6) fills train; pyridine (3)
    # and the acyclic pair (scaffold '') fill val; the single-molecule scaffolds go to test.
    assert {k: rows_of(v) for k, v in first.items()} == {
        "train": [0, 1, 2, 3, 4, 5], "val": [7, 8, 9, 10, 11], "test": [6, 12, 13, 14, 15]}


def test_scaffold_split_function_ties_in_file_order_without_a_seed():
    # Ties between a and b go in file order (a first); a later small group may still fit train.
    parts = scaffold_split(["a", "b", "b", "a", "c", ""], (0.5, 0.25, 0.25), seed=None)
    assert parts == [[0, 3, 4], [1, 2], [5]]


def test_scaffold_split_ties_do_not_depend_on_file_order():
    scaffolds = [f"s{i}" for i in range(40)] + ["big"] * 10  # 40 singletons, one group of 10

    def members(order: list[str], parts: list[list[int]]) -> list[set[str]]:
        return [{order[i] for i in part} for part in parts]

    parts = scaffold_split(scaffolds, (0.5, 0.25, 0.25))
    assert [len(part) for part in parts] == [25, 12, 13]
    split, reverse = members(scaffolds, parts), scaffolds[::-1]
    # the same scaffolds in each split whatever the order of the rows; the largest group first
    assert split == members(reverse, scaffold_split(reverse, (0.5, 0.25, 0.25)))
    assert "big" in split[0]
    # ties are not in file order: the 12 validation singletons are not the 15th to 26th rows
    assert split[1] != {f"s{i}" for i in range(15, 27)}
    assert members(scaffolds, scaffold_split(scaffolds, (0.5, 0.25, 0.25), seed=1))[1] != split[1]


def test_scaffold_split_of_a_file_sorted_by_target_keeps_val_and_test_alike(tmp_path):
    # 60 single-molecule scaffolds written in order of their target (an assay export sorted by
    # potency): file-order ties give test the 6 largest targets, hashed ties a spread like val's
    smiles = [f"C1CC1{'C' * k}C1CC1" for k in range(60)]  # the linker is in the scaffold
    path = indexed_csv(tmp_path / "sorted.csv", smiles)
    old = load(path, split_sizes=(0.8, 0.1, 0.1), scaffold_ties="file_order")
    assert rows_of(old["test"]) == list(range(54, 60))
    new = load(path, split_sizes=(0.8, 0.1, 0.1))
    assert [len(new[k]) for k in ("train", "val", "test")] == [48, 6, 6]
    assert rows_of(new["test"]) != list(range(54, 60))
    assert 10 < np.mean(rows_of(new["test"])) < 50
    with pytest.raises(ValueError, match="scaffold_ties"):
        load(path, scaffold_ties="sorted")


def test_random_split_sizes_and_seed(tmp_path):
    path = indexed_csv(tmp_path / "r.csv")
    splits = load(path, split="random", split_sizes=(0.6, 0.2, 0.2), split_seed=1)
    assert [len(splits[k]) for k in ("train", "val", "test")] == [12, 4, 4]
    assert sorted(sum((rows_of(v) for v in splits.values()), [])) == list(range(20))
    again = load(path, split="random", split_sizes=(0.6, 0.2, 0.2), split_seed=1)
    other = load(path, split="random", split_sizes=(0.6, 0.2, 0.2), split_seed=2)
    assert rows_of(again["val"]) == rows_of(splits["val"]) != rows_of(other["val"])


def test_column_split(tmp_path):
    labels = ["train", "Valid", "test", "val", " train ", "TEST"]
    rows = [[s, i, lab] for i, (s, lab) in enumerate(zip(SMILES, labels, strict=False))]
    path = write_csv(tmp_path / "col.csv", ["smiles", "y", "fold"], rows)
    splits = load(path, split="column", split_column="fold")
    assert {k: rows_of(v) for k, v in splits.items()} == {
        "train": [0, 4], "val": [1, 3], "test": [2, 5]}
    rows[2][2] = "holdout"
    write_csv(path, ["smiles", "y", "fold"], rows)
    with pytest.raises(ValueError, match="line 4: column 'fold' = 'holdout'"):
        load(path, split="column", split_column="fold")


def test_binary_targets_must_be_0_or_1(tmp_path):
    rows = [[s, i % 2] for i, s in enumerate(SMILES)]
    path = write_csv(tmp_path / "b.csv", ["smiles", "active"], rows)
    module = SmilesCSVDataModule(str(path), ["active"], task="binary", split="random")
    assert module.dataset_info["task"] == "binary"
    assert {g.y.item() for g in module.load_splits()["train"]} == {0.0, 1.0}
    rows[4][1] = 2
    write_csv(path, ["smiles", "active"], rows)
    with pytest.raises(ValueError, match="line 6: column 'active' = '2': binary labels"):
        load(path, target_columns=["active"], task="binary")


def test_multi_target_regression_and_dataset_info(tmp_path):
    rows = [[s, i, -2 * i] for i, s in enumerate(SMILES)]
    path = write_csv(tmp_path / "esol.tsv", ["smiles", "a", "b"], rows, delimiter="\t")
    module = SmilesCSVDataModule(str(path), ["a", "b"], featurizer="zinc", max_atoms=30,
                                 split="random", batch_size=4)
    info = module.dataset_info
    assert info["name"] == "esol" and info["target_names"] == ["a", "b"]
    assert featurizer_from_config(info["featurizer"]).to_config() == info["featurizer"]
    assert info["atom_feature_dims"] == [28]
    module.setup("fit")
    assert all(g.y.shape == (1, 2) for g in module.splits["train"])
    mean, std = module.target_statistics()
    assert len(mean) == len(std) == 2 and mean[1] == pytest.approx(-2 * mean[0])
    assert next(iter(module.train_dataloader())).y.shape[1] == 2


def test_gzipped_csv(tmp_path):
    rows = [[f"mol, {i}", s, i] for i, s in enumerate(SMILES)]
    path = write_csv(tmp_path / "mols.csv.gz", ["name", "smiles", "y"], rows)
    module = SmilesCSVDataModule(str(path), "y", split="random")
    assert sum(len(v) for v in module.load_splits().values()) == 20
    assert module.dataset_info["name"] == "mols"


@pytest.mark.parametrize("kwargs", [
    {"split_sizes": (0.8, 0.1, 0.2)}, {"split": "kfold"}, {"featurizer": "morgan"},
    {"target_columns": []}, {"on_invalid": "ignore"},
])
def test_bad_arguments(kwargs):
    kwargs.setdefault("target_columns", ["y"])
    with pytest.raises(ValueError):
        SmilesCSVDataModule("x.csv", **kwargs)


def test_cli_fit_on_csv(tmp_path, monkeypatch):
    from graphormer_sepnorm.cli import main

    monkeypatch.setattr(sys, "argv", ["graphormer-sepnorm"])  # not pytest's own arguments
    path = indexed_csv(tmp_path / "train.csv")
    cli = main(["fit", "--config", str(CONFIG), "--data.path", str(path),
                "--data.target_columns", "[y]", "--data.root", str(tmp_path),
                "--data.batch_size", "8", "--model.init_from", "none",
                "--model.config.num_layers", "2", "--trainer.fast_dev_run", "true",
                "--trainer.default_root_dir", str(tmp_path),
                "--trainer.logger.init_args.save_dir", str(tmp_path / "runs")])
    model = cli.model
    assert model.dataset_info["target_names"] == ["y"] and model.task.name == "regression"
    assert model.hparams["standardize_targets"]
    assert model.task.target_mean.item() == pytest.approx(cli.datamodule.target_statistics()[0][0])
    assert "val/mae" in cli.trainer.callback_metrics


def test_cli_fit_starts_from_the_bundled_pretrained_model(tmp_path, monkeypatch, capsys):
    # the config's default: every encoder tensor from the shipped model, a fresh head
    from graphormer_sepnorm.cli import main
    from graphormer_sepnorm.prediction.checkpoints import bundled_checkpoint_path

    monkeypatch.setattr(sys, "argv", ["graphormer-sepnorm"])
    path = indexed_csv(tmp_path / "train.csv")
    cli = main(["fit", "--config", str(CONFIG), "--data.path", str(path),
                "--data.target_columns", "[y]", "--data.root", str(tmp_path),
                "--data.batch_size", "8", "--trainer.max_steps", "1", "--trainer.max_epochs", "1",
                "--model.lr", "1e-12", "--model.head_lr", "1e-12", "--model.end_lr", "0",
                "--test_best", "false",
                "--trainer.default_root_dir", str(tmp_path),
                "--trainer.logger.init_args.save_dir", str(tmp_path / "runs")])
    assert cli.model.hparams["init_from"] == "pretrained"
    assert "init_from" in capsys.readouterr().out
    shipped = torch.load(bundled_checkpoint_path("pretrained"), weights_only=True)["state_dict"]
    trained = cli.model.state_dict()
    weights = [k for k in shipped if k.startswith("model.") and "running" not in k
               and "num_batches" not in k]
    assert len(weights) > 200
    for key in weights:  # lr ~0: the weights are still the shipped ones (BatchNorm stats move)
        if key.startswith("model.head."):
            assert key not in trained  # an MLP head on [embedding, molecule features]
        else:
            torch.testing.assert_close(trained[key], shipped[key], atol=1e-9, rtol=0, msg=key)
    assert cli.model.config.mol_feature_dim == 2222 and cli.model.config.head_hidden_dim == 256


@pytest.mark.parametrize("precision", ["bf16-mixed", "bf16-true"])
def test_cli_fit_in_bfloat16_with_gradient_clipping(tmp_path, monkeypatch, precision):
    # bf16-mixed: Lightning refused to clip for the fused AdamW (no gradient scaler is involved);
    # bf16-true: the graph token's BatchNorm met bfloat16 parameters. Both train now, and the
    # BatchNorm's statistics stay float32.
    from graphormer_sepnorm.cli import main
    from graphormer_sepnorm.nn import GraphTokenBatchNorm

    monkeypatch.setattr(sys, "argv", ["graphormer-sepnorm"])
    path = indexed_csv(tmp_path / "train.csv")
    cli = main(["fit", "--config", str(CONFIG), "--data.path", str(path),
                "--data.target_columns", "[y]", "--data.batch_size", "8",
                "--model.init_from", "none", "--model.config.num_layers", "2",
                "--trainer.precision", precision,
                "--trainer.gradient_clip_val", "0.5", "--trainer.max_steps", "3",
                "--trainer.max_epochs", "1", "--test_best", "false",
                "--trainer.default_root_dir", str(tmp_path),
                "--trainer.logger.init_args.save_dir", str(tmp_path / "runs")])
    assert cli.trainer.global_step > 0 and torch.isfinite(cli.trainer.callback_metrics["val/mae"])
    norms = [m for m in cli.model.modules() if isinstance(m, GraphTokenBatchNorm)]
    assert norms and all(m.running_var.dtype == torch.float32 for m in norms)
    assert all(int(m.num_batches_tracked) > 0 for m in norms)
    if precision == "bf16-true":
        assert all(p.dtype == torch.bfloat16 for p in cli.model.model.head.parameters())


def test_cli_fit_with_molecule_features_then_predict_from_the_checkpoint(tmp_path, monkeypatch):
    # the features travel in the checkpoint's featurizer config: prediction needs no setting
    from graphormer_sepnorm.cli import main
    from graphormer_sepnorm.data import GraphormerCollator
    from graphormer_sepnorm.prediction import Predictor, load_with_blend

    monkeypatch.setattr(sys, "argv", ["graphormer-sepnorm"])
    path = indexed_csv(tmp_path / "train.csv")
    cli = main(["fit", "--config", str(CONFIG), "--data.path", str(path),
                "--data.target_columns", "[y]", "--data.root", str(tmp_path),
                "--data.mol_features", "[rdkit2d,morgan]", "--data.batch_size", "8",
                "--model.config.head_hidden_dim", "16", "--model.head_lr", "1e-3",
                "--trainer.max_steps", "2", "--trainer.max_epochs", "1", "--test_best", "false",
                "--trainer.default_root_dir", str(tmp_path),
                "--trainer.logger.init_args.save_dir", str(tmp_path / "runs")])
    assert cli.model.config.mol_feature_dim == 2222
    assert cli.model.hparams["init_from"] == "pretrained"  # the encoder still starts from it
    groups = cli.trainer.optimizers[0].param_groups
    assert [g["initial_lr"] for g in groups] == [2e-4, 1e-3]
    head = cli.model.model.head
    assert {id(p) for p in groups[1]["params"]} == {id(p) for p in head.parameters()}
    last = Path(cli.trainer.checkpoint_callback.dirpath) / "last.ckpt"
    module, blend = load_with_blend(str(last))
    assert module.dataset_info["featurizer"]["mol_features"] == ["rdkit2d", "morgan"]
    test = cli.datamodule.splits["test"]
    smiles = [SMILES[int(g.y[0, 0])] for g in test]
    with Predictor(module, blend=blend) as predictor:
        assert predictor.columns == ["y", "y_std", "y_lo90", "y_hi90"]
        predicted = predictor.predict(smiles).predictions[:, :1]
    batch = GraphormerCollator(5)(test)
    with torch.no_grad():
        expected = blend(batch).numpy()
        # the config's blend: half the network, half the GP fitted on the training molecules
        network = module(batch)
        blended = 0.5 * network + 0.5 * blend.gp(batch.mol_x)
    np.testing.assert_allclose(predicted, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(expected, blended.numpy(), rtol=1e-5, atol=1e-6)
    assert blend.weight == 0.5
    assert blend.gp.train_x.shape == (len(cli.datamodule.splits["train"]), 2222)
    assert not np.allclose(expected, network.numpy(), atol=1e-3)


def test_a_resumed_fit_keeps_the_gp_it_saved(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["graphormer-sepnorm"])
    version = ("--trainer.logger.init_args.version", "0")
    first = fit_small(tmp_path, *version, "--trainer.max_epochs", "1")
    assert "fingerprint GP fitted on" in capsys.readouterr().out
    saved = gp_of(first).state_dict()
    last = Path(first.trainer.checkpoint_callback.dirpath) / "last.ckpt"
    again = fit_small(tmp_path, *version, "--trainer.max_epochs", "2", "--ckpt_path", str(last))
    assert again.trainer.current_epoch == 2
    assert "fingerprint GP fitted on" not in capsys.readouterr().out
    for name, value in gp_of(again).state_dict().items():
        torch.testing.assert_close(value, saved[name], msg=name)


def gp_of(cli):
    """The fitted GP of a CLI run (its FingerprintGPBlend callback's)."""
    from graphormer_sepnorm.ensemble import FingerprintGPBlend

    (callback,) = [c for c in cli.trainer.callbacks if isinstance(c, FingerprintGPBlend)]
    return callback.blend.gp


def test_fit_chooses_checkpoints_on_the_network_and_validate_scores_the_blend(tmp_path,
                                                                             monkeypatch):
    # chosen on the blend, a GP that fits validation well picks an undertrained network
    from graphormer_sepnorm.cli import main
    from graphormer_sepnorm.data import GraphormerCollator

    monkeypatch.setattr(sys, "argv", ["graphormer-sepnorm"])
    fit = fit_small(tmp_path, "--trainer.max_epochs", "1")
    module = fit.model.eval()
    batch = GraphormerCollator(5)(fit.datamodule.splits["val"])
    y = batch.y
    with torch.no_grad():
        network = module(batch)
        blended = 0.5 * network + 0.5 * gp_of(fit)(batch.mol_x)
    assert not torch.allclose(network, blended, atol=1e-3)
    # fit: val/mae is the network's (checkpoints are chosen on it), val/mae_blend the blend's
    metrics = fit.trainer.callback_metrics
    assert metrics["val/mae"].item() == pytest.approx((network - y).abs().mean().item(), rel=1e-5)
    assert metrics["val/mae_blend"].item() == pytest.approx((blended - y).abs().mean().item(),
                                                            rel=1e-5)
    # validate from the checkpoint alone (no config): both again, one meaning each
    checkpoint = str(Path(fit.trainer.checkpoint_callback.dirpath) / "last.ckpt")
    again = main(["validate", "--ckpt_path", checkpoint,
                  "--trainer.default_root_dir", str(tmp_path)]).trainer.callback_metrics
    assert again["val/mae"].item() == pytest.approx(metrics["val/mae"].item(), rel=1e-5)
    assert again["val/mae_blend"].item() == pytest.approx(
        (blended - y).abs().mean().item(), rel=1e-5)
    # --gp.weight 1: the GP alone
    alone = main(["validate", "--ckpt_path", checkpoint, "--gp.weight", "1",
                  "--trainer.default_root_dir", str(tmp_path)]).trainer.callback_metrics
    with torch.no_grad():
        gp_mae = (gp_of(fit)(batch.mol_x) - y).abs().mean().item()
    assert alone["val/mae_blend"].item() == pytest.approx(gp_mae, rel=1e-5)


def test_the_blend_predicts_calibrated_deviations_and_test_scores_them(tmp_path, monkeypatch):
    from graphormer_sepnorm.cli import main
    from graphormer_sepnorm.predict import predict_smiles

    monkeypatch.setattr(sys, "argv", ["graphormer-sepnorm"])
    fit = fit_small(tmp_path, "--trainer.max_epochs", "2")
    checkpoint = fit.trainer.checkpoint_callback.best_model_path
    entry = torch.load(checkpoint, weights_only=True)["ensemble"]
    assert len(entry["q90"]) == 1 and entry["q90"][0] > 0  # calibrated on validation
    metrics = main(["test", "--ckpt_path", checkpoint, "--trainer.default_root_dir",
                    str(tmp_path)]).trainer.callback_metrics
    for name in ("coverage90", "nll"):
        assert torch.isfinite(metrics[f"test/{name}_blend"]), name
    # a rank correlation needs more than two test molecules (the tiny split has two)
    assert len(fit.datamodule.splits["test"]) == 2
    assert torch.isnan(metrics["test/std_error_spearman_blend"])
    assert 0.0 <= float(metrics["test/coverage90_blend"]) <= 1.0
    frame = predict_smiles(SMILES[:6], checkpoint=checkpoint)
    assert list(frame.columns) == ["smiles", "y", "y_std", "y_lo90", "y_hi90", "error"]
    assert (frame["y_std"] > 0).all()
    np.testing.assert_allclose(frame["y_hi90"] - frame["y"], 1.6448536 * frame["y_std"],
                               rtol=1e-5)
    # a checkpoint from before the deviations, converted: the same predictions, no deviations
    old = torch.load(checkpoint, weights_only=True)
    old["ensemble"]["state"] = {k: v for k, v in old["ensemble"]["state"].items()
                                if k not in ("present", "loo_sq")}
    del old["ensemble"]["q90"], old["ensemble"]["deviation"], old[FORMAT_KEY]
    torch.save(old, tmp_path / "old.ckpt")
    convert_file(tmp_path / "old.ckpt", tmp_path / "old.ckpt")
    before = predict_smiles(SMILES[:6], checkpoint=tmp_path / "old.ckpt")
    assert list(before.columns) == ["smiles", "y", "error"]
    np.testing.assert_allclose(before["y"], frame["y"], rtol=1e-6)
