"""Ensembles at prediction: several checkpoints (or a packed fit's replicas) predict as one."""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from tiny_data import SMILES, own_csv

from graphormer_sepnorm.checkpoints import CheckpointError, stamp
from graphormer_sepnorm.cli import main
from graphormer_sepnorm.data import GraphormerCollator, add_shortest_paths
from graphormer_sepnorm.ensemble.calibration import Z90
from graphormer_sepnorm.ensemble.members import Calibration, combine
from graphormer_sepnorm.predict import predict_smiles
from graphormer_sepnorm.prediction.checkpoints import members_of_payload
from graphormer_sepnorm.prediction.ensembles import predictor_models
from graphormer_sepnorm.prediction.io import InputError
from graphormer_sepnorm.prediction.runner import predict_file

TINY = ["--model.config.num_layers", "2", "--model.init_from", "none", "--data.batch_size", "8",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        "--trainer.max_epochs", "2", "--test_best", "false", "--data.split", "random"]


def fit(folder: Path, path: Path, seed: int, *extra: str) -> str:
    cli = main(["fit", "--config", "smiles_csv", "--data.path", str(path),
                "--seed_everything", str(seed), "--trainer.logger.init_args.save_dir",
                str(folder / "runs"), *TINY, *extra])
    return cli.trainer.checkpoint_callback.best_model_path


@pytest.fixture(scope="module")
def fits(tmp_path_factory):
    """Two seeds of one split: a binary table, a regression table, and one with descriptors."""
    tmp = tmp_path_factory.mktemp("ensembles")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", ["graphormer-sepnorm"])
        binary = tmp / "active.csv"
        binary.write_text("smiles,active\n" + "".join(f"{s},{i % 2}\n"
                                                      for i, s in enumerate(SMILES)))
        regression = own_csv(tmp / "own.csv", rows=40)
        own = tmp / "own_features.csv"
        frame = pd.read_csv(regression)
        frame["clogp"] = np.arange(len(frame)) * 0.1
        frame.to_csv(own, index=False)
        found = {
            "binary": [fit(tmp, binary, s, "--data.target_columns", "[active]",
                           "--data.task", "binary", "--data.mol_features", "[]",
                           "--model.config.head_hidden_dim", "0") for s in (0, 1)],
            "regression": [fit(tmp, regression, s, "--data.target_columns", "[logS]",
                               "--data.mol_features", "[morgan]") for s in (0, 1)],
            "features": [fit(tmp, own, 0, "--data.target_columns", "[logS]",
                             "--data.mol_features", "[]", "--data.feature_columns", "[clogp]")]}
    return tmp, found


def test_an_ensemble_of_two_is_the_numpy_mean_and_std_of_its_members(fits):
    _, found = fits
    a, b = (predict_smiles(SMILES[:7], path) for path in found["binary"])
    both = predict_smiles(SMILES[:7], found["binary"])
    assert list(both.columns) == ["smiles", "active_probability", "active_probability_std",
                                  "error"]
    probabilities = np.stack([a["active_probability"], b["active_probability"]])
    np.testing.assert_allclose(both["active_probability"], probabilities.mean(0), rtol=1e-6)
    np.testing.assert_allclose(both["active_probability_std"], probabilities.std(0), atol=1e-7)


def test_a_regression_ensemble_of_seeds_calibrates_on_its_shared_validation_split(fits, capsys):
    tmp, found = fits
    models, _, calibration, note = predictor_models(found["regression"])
    assert len(models) == 2 and calibration.kind == "split"
    assert "split-conformal on the" in note and "validation molecules" in note
    (tmp / "new.csv").write_text("smiles\n" + "\n".join(SMILES[:5]) + "\n")
    predict_file(tmp / "new.csv", tmp / "new_preds.csv", found["regression"], progress=False,
                 num_workers=0, overwrite=True)
    out = pd.read_csv(tmp / "new_preds.csv", keep_default_na=False)
    assert "90% interval by split-conformal" in capsys.readouterr().err
    assert list(out.columns) == ["smiles", "logS", "logS_std", "logS_lo90", "logS_hi90", "error"]
    np.testing.assert_allclose(out["logS_hi90"] - out["logS"], Z90 * out["logS_std"], rtol=1e-5)


def test_members_must_agree_on_task_and_targets(fits):
    _, found = fits
    with pytest.raises(CheckpointError, match="ensemble members must agree on task"):
        predict_smiles(SMILES[:3], [found["binary"][0], found["regression"][0]])
    with pytest.raises(CheckpointError, match="must agree on featurizer"):
        predict_smiles(SMILES[:3], [found["regression"][0], found["features"][0]])


def test_descriptor_columns_are_required_by_name_at_prediction(fits):
    tmp, found = fits
    (path,) = found["features"]
    (tmp / "bare.csv").write_text("smiles\nCCO\n")
    with pytest.raises(InputError, match=r"reads the descriptor column\(s\) \['clogp'\]"):
        predict_file(tmp / "bare.csv", tmp / "bare_preds.csv", path, progress=False,
                     num_workers=0)
    assert not (tmp / "bare_preds.csv").exists()
    with pytest.raises(InputError, match="pass them as features="):
        predict_smiles(["CCO"], path)
    (tmp / "with.csv").write_text("smiles,clogp\nCCO,0.5\nCCN,\n")
    predict_file(tmp / "with.csv", tmp / "with_preds.csv", path, progress=False, num_workers=0)
    out = pd.read_csv(tmp / "with_preds.csv", keep_default_na=False)
    assert out["error"][0] == "" and "descriptor" in out["error"][1]
    frame = predict_smiles(["CCO"], path, features=pd.DataFrame({"clogp": [0.5]}))
    assert frame["logS"][0] == pytest.approx(float(out["logS"][0]), rel=1e-6)


def test_a_packed_fits_replicas_are_its_members():
    from graphs import ATOM_DIMS, BOND_DIMS, random_graph

    from graphormer_sepnorm.nn import GraphormerConfig
    from graphormer_sepnorm.training.packed_module import PackedGraphormerModule

    info = {"task": "regression", "target_names": ["y"], "atom_feature_dims": list(ATOM_DIMS),
            "edge_feature_dims": list(BOND_DIMS), "featurizer": {"name": "ogb"}}
    config = GraphormerConfig(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=4)
    packed = PackedGraphormerModule(dataset_info=info, config=config, seeds=[3, 5]).eval()
    payload = stamp({"state_dict": packed.state_dict(), "hyper_parameters": dict(packed.hparams)})
    members = members_of_payload(payload, "packed.ckpt")
    assert [name for _, _, name in members] == ["packed.ckpt[seed 3]", "packed.ckpt[seed 5]"]
    batch = GraphormerCollator(20)(add_shortest_paths([random_graph(6 + i, i, p=0.4)
                                                       for i in range(4)]))
    with torch.no_grad():
        for index, (module, blend, _) in enumerate(members):
            assert blend is None
            torch.testing.assert_close(module.model(batch),
                                       packed.model.replica(index).eval()(batch))


def test_combine_and_cv_plus_by_hand():
    a, b = torch.tensor([[1.0], [2.0]]), torch.tensor([[3.0], [2.0]])
    mean, spread, total = combine([(a, torch.tensor([[2.0], [0.0]])), (b, None)])
    torch.testing.assert_close(mean, torch.tensor([[2.0], [2.0]], dtype=torch.float64))
    torch.testing.assert_close(spread, torch.tensor([[1.0], [0.0]], dtype=torch.float64))
    # law of total variance: mean of (4, 0) and (0, 0) plus the spread's 1
    torch.testing.assert_close(total, torch.tensor([[3.0 ** 0.5], [0.0]], dtype=torch.float64))
    # CV+ with one fold model and 9 residuals 1..9: the 1st and 9th of mu -/+ R (alpha 0.1)
    calibration = Calibration("cv+", residuals=[torch.arange(1.0, 10.0)[:, None]])
    lo, hi = calibration.interval(torch.tensor([[[5.0]]], dtype=torch.float64), total[:1])
    assert (float(lo), float(hi)) == (-4.0, 14.0)
