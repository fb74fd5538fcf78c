import gzip
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from tiny_data import SMILES, featurize_with_paths

from graphormer_sepnorm.checkpoints import stamp
from graphormer_sepnorm.chem.featurizers import OgbFeaturizer, ZincFeaturizer
from graphormer_sepnorm.data import GraphormerCollator
from graphormer_sepnorm.nn import GraphormerConfig
from graphormer_sepnorm.predict import main, predict_smiles
from graphormer_sepnorm.prediction import CheckpointError, Predictor, load_checkpoint
from graphormer_sepnorm.prediction.checkpoints import bundled_checkpoint_path
from graphormer_sepnorm.prediction.prepare import size_sorted_batches
from graphormer_sepnorm.training.module import GraphormerModule

ROOT = Path(__file__).resolve().parents[1]
TINY = GraphormerConfig(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=2, max_degree=8,
                        max_distance=8, multi_hop_max_dist=5)
BAD = {
    "": "empty SMILES",
    "   ": "empty SMILES",
    "garbage!!": "invalid SMILES",
    "C1CC(C": "invalid SMILES",
    "CC(C)(C)(C)C": "invalid SMILES",  # five-valent carbon
    "C[Si](C)(C)C": "not in the ZINC vocabulary",
    "C" * 200: "supports at most 100",
}


pytestmark = pytest.mark.usefixtures("one_thread")


def make_module(featurizer, task="regression", target="penalized_logp") -> GraphormerModule:
    info = {"name": "tiny", "task": task, "target_names": [target],
            "atom_feature_dims": featurizer.atom_feature_dims,
            "edge_feature_dims": featurizer.edge_feature_dims,
            "featurizer": featurizer.to_config()}
    module = GraphormerModule(dataset_info=info, config=TINY)
    graphs, _ = featurize_with_paths(SMILES, featurizer)
    module.train()
    with torch.no_grad():  # non-trivial BatchNorm running statistics
        module.model(GraphormerCollator(TINY.multi_hop_max_dist)(graphs))
    if module.task.scales_targets:
        module.task.set_scaler([2.0], [3.0])
    return module.eval()


def save(module: GraphormerModule, path: Path) -> Path:
    hparams = dict(module.hparams) | {"_instantiator": "lightning.pytorch.cli.instantiate_module"}
    torch.save(stamp({"state_dict": module.state_dict(), "hyper_parameters": hparams}), path)
    return path


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    return save(make_module(ZincFeaturizer(max_atoms=100)), tmp_path_factory.mktemp("c") / "t.ckpt")


@pytest.fixture(scope="module")
def module(ckpt) -> GraphormerModule:
    return load_checkpoint(ckpt)


def test_load_checkpoint_round_trip(ckpt, module):
    original = torch.load(ckpt, weights_only=True)["state_dict"]
    loaded = module.state_dict()
    assert not module.training
    assert all(torch.equal(loaded[k], v) for k, v in original.items())


def test_predictions_match_module_forward(module):
    frame = predict_smiles(SMILES, module)
    graphs, _ = featurize_with_paths(SMILES, module_featurizer(module))
    with torch.no_grad():
        expected = module(GraphormerCollator(5)(graphs))[:, 0].numpy()
    assert list(frame.columns) == ["smiles", "penalized_logp", "error"]
    np.testing.assert_allclose(frame["penalized_logp"], expected, atol=1e-5)
    assert (frame["error"] == "").all()


def module_featurizer(module):
    return Predictor(module).featurizer


@pytest.mark.parametrize("smiles, reason", BAD.items())
def test_bad_inputs_are_flagged(module, smiles, reason):
    frame = predict_smiles(["CCO", smiles, "c1ccccc1"], module)
    assert reason in frame["error"][1]
    assert np.isnan(frame["penalized_logp"][1])
    assert frame["error"][0] == frame["error"][2] == ""
    assert np.isfinite(frame["penalized_logp"][[0, 2]]).all()


def test_salts_and_fragments(module):
    # No salt stripping (training featurized every fragment too): a multi-fragment molecule is
    # one disconnected graph; a counter-ion outside the ZINC vocabulary is flagged.
    frame = predict_smiles(["[Na+].[O-]C(=O)c1ccccc1", "CCO.CCN", "CN1CCC[C@H]1c1cccnc1.Cl"],
                           module)
    assert "'Na' (token 'Na +') not in the ZINC vocabulary" in frame["error"][0]
    assert (frame["error"][1:] == "").all() and frame["penalized_logp"][1:].notna().all()
    alone = predict_smiles(["CCO", "CCN"], module)["penalized_logp"]
    assert abs(frame["penalized_logp"][1] - alone[0]) > 1e-6  # both fragments count


def test_batch_size_and_order_invariance(module):
    smiles = SMILES * 3 + ["CC" * 15, "c1ccc2ccccc2c1"]
    base = predict_smiles(smiles, module, batch_size=len(smiles))["penalized_logp"].to_numpy()
    for batch_size in (1, 3, 7):
        other = predict_smiles(smiles, module, batch_size=batch_size)["penalized_logp"]
        assert np.abs(other.to_numpy() - base).max() <= 1e-5
    perm = np.random.default_rng(0).permutation(len(smiles))
    shuffled = predict_smiles([smiles[i] for i in perm], module, batch_size=5)
    assert np.abs(shuffled["penalized_logp"].to_numpy() - base[perm]).max() <= 1e-5


def test_embeddings(module):
    frame, emb = predict_smiles(["CCO", "xx", "c1ccccc1"], module, return_embeddings=True)
    assert emb.shape == (3, TINY.hidden_dim) and emb.dtype == np.float32
    assert np.isnan(emb[1]).all() and np.isfinite(emb[[0, 2]]).all()


def test_binary_model_column_and_probabilities(tmp_path):
    path = save(make_module(OgbFeaturizer(), "binary", "hiv_active"), tmp_path / "hiv.ckpt")
    frame = predict_smiles(["CCO", "C[Si](C)(C)C", "[Na+].[O-]C(=O)c1ccccc1", "oops"], str(path))
    assert list(frame.columns) == ["smiles", "hiv_active_probability", "error"]
    probs = frame["hiv_active_probability"][:3]
    assert ((probs > 0) & (probs < 1)).all() and (frame["error"][:3] == "").all()
    assert frame["error"][3].startswith("invalid SMILES")


def test_size_sorted_batches_cap_large_molecules():
    batches = size_sorted_batches([5, 100, 3, 100, 4], batch_size=4, max_pairs=4 * 20 ** 2)
    assert batches == [[2, 4, 0], [1], [3]]


class Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_pickle_payload_is_refused_without_running(tmp_path, module):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams),
                "extra": Payload(marker)}, path)
    with pytest.raises(CheckpointError, match="arbitrary pickled objects"):
        load_checkpoint(path)
    assert main([str(ROOT / "examples/molecules.smi"), "-o", str(tmp_path / "o.csv"),
                 "--checkpoint", str(path)]) == 2
    assert not marker.exists() and not (tmp_path / "o.csv").exists()


def test_unknown_and_missing_checkpoints(tmp_path):
    with pytest.raises(CheckpointError, match="bundled models"):
        load_checkpoint("no-such-model")
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "missing.ckpt")
    try:
        assert bundled_checkpoint_path("zinc").name == "zinc.ckpt"
    except CheckpointError as e:
        assert "is not installed" in str(e) and "zinc.ckpt" in str(e)


def read(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, keep_default_na=False, dtype=str)


def test_cli_smi_with_bad_rows_and_summary(tmp_path, ckpt, capsys):
    out = tmp_path / "preds.csv"
    lines = ["CCO ethanol", "", "   ", "C1CC(C broken ring", "c1ccccc1 benzene ring"]
    src = tmp_path / "mols.smi"
    src.write_text("\n".join(lines) + "\n")
    assert main([str(src), "-o", str(out), "--checkpoint", str(ckpt), "--batch-size", "2"]) == 0
    frame = read(out)
    assert list(frame.columns) == ["smiles", "name", "penalized_logp", "error"]
    assert frame["name"].tolist() == ["ethanol", "", "", "broken ring", "benzene ring"]
    assert (frame["error"] != "").tolist() == [False, True, True, True, False]
    assert "rows: 5, predicted: 2, flagged: 3" in capsys.readouterr().err


def test_refuses_to_overwrite(tmp_path, ckpt):
    src = tmp_path / "m.smi"
    src.write_text("CCO\n")
    out = src.with_name("m_preds.csv")  # the default output name
    out.write_text("keep me\n")
    assert main([str(src), "--checkpoint", str(ckpt)]) != 0
    assert out.read_text() == "keep me\n"
    assert main([str(src), "--checkpoint", str(ckpt), "--overwrite"]) == 0
    assert read(out)["smiles"].tolist() == ["CCO"]


def test_gz_input_and_embeddings_file(tmp_path, ckpt):
    src = tmp_path / "m.smi.gz"
    with gzip.open(src, "wt") as f:
        f.write("CCO a\nbad( b\nc1ccccc1 c\n")
    emb = tmp_path / "e.npy"
    assert main([str(src), "--checkpoint", str(ckpt), "--embeddings", str(emb)]) == 0
    frame = read(tmp_path / "m_preds.csv")
    assert frame["name"].tolist() == ["a", "b", "c"]
    vectors = np.load(emb)
    assert vectors.shape == (3, TINY.hidden_dim) and np.isnan(vectors[1]).all()


def test_csv_with_quoted_fields_keeps_columns(tmp_path, ckpt):
    src = tmp_path / "in.csv"
    src.write_text('id,SMILES,note\n7,CCO,"plain, with comma"\n8,"C1CC(C","say ""hi"""\n'
                   '9,c1ccccc1,"two\nlines"\n')
    out = tmp_path / "out.csv"
    assert main([str(src), "-o", str(out), "--checkpoint", str(ckpt)]) == 0
    frame = read(out)
    assert list(frame.columns) == ["id", "SMILES", "note", "penalized_logp", "error"]
    assert frame["note"].tolist() == ["plain, with comma", 'say "hi"', "two\nlines"]
    assert frame["id"].tolist() == ["7", "8", "9"] and frame["error"][1] != ""


def test_missing_smiles_column(tmp_path, ckpt, capsys):
    src = tmp_path / "in.tsv"
    src.write_text("id\tmol\n1\tCCO\n")
    assert main([str(src), "--checkpoint", str(ckpt)]) == 2
    assert "no SMILES column" in capsys.readouterr().err
    assert main([str(src), "--checkpoint", str(ckpt), "--smiles-column", "mol"]) == 0


def test_default_checkpoint_name_is_molhiv():
    from graphormer_sepnorm.predict import build_parser

    assert build_parser().parse_args(["x.smi"]).checkpoint == ["molhiv"]
    two = build_parser().parse_args(["x.smi", "--checkpoint", "a.ckpt", "b.ckpt"])
    assert two.checkpoint == ["a.ckpt", "b.ckpt"]


def test_python_dash_m(tmp_path, ckpt):
    out = tmp_path / "o.csv"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run = subprocess.run([sys.executable, "-m", "graphormer_sepnorm.predict",
                          str(ROOT / "examples/molecules.smi"), "-o", str(out),
                          "--checkpoint", str(ckpt)], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    frame = read(out)
    # the two bad lines, and sodium benzoate: Na is outside the ZINC vocabulary
    assert len(frame) == 22 and (frame["error"] != "").sum() == 3
    assert "flagged: 3" in run.stderr


@pytest.mark.parametrize(("workers", "head"), [(1, 256), (3, 256), (2, 2)])
def test_chunked_stream_with_worker_processes_keeps_order_and_flags(tmp_path, ckpt, module,
                                                                     workers, head, monkeypatch):
    from graphormer_sepnorm.prediction import engine
    from graphormer_sepnorm.prediction.runner import predict_file

    # head: rows of the first chunk featurized in this process (2: the rest in the workers)
    monkeypatch.setattr(engine, "FIRST_ROWS_IN_PROCESS", head)

    # bad rows in the first, a middle and the last chunk: each flagged in its own row
    smiles = ["bad(", *SMILES[:9], "", *SMILES[9:]]
    src = tmp_path / "in.csv"
    pd.DataFrame({"smiles": smiles, "k": range(len(smiles))}).to_csv(src, index=False)
    summary = predict_file(src, tmp_path / "o.csv", str(ckpt), batch_size=3,
                           num_workers=workers, chunk_size=4, progress=False)
    assert (summary.rows, summary.predicted, summary.flagged) == (22, 20, 2)
    frame = pd.read_csv(tmp_path / "o.csv", keep_default_na=False)
    expected = predict_smiles(smiles, module)
    assert frame["k"].tolist() == list(range(22))
    assert frame["error"].tolist() == expected["error"].tolist()
    got = pd.to_numeric(frame["penalized_logp"]).to_numpy()
    np.testing.assert_allclose(got, expected["penalized_logp"], atol=1e-5)


@pytest.mark.parametrize(("cores", "features", "expected"), [
    (2, ["rdkit2d", "morgan"], 2), (2, ["morgan", "rdkit2d"], 2), (2, ["morgan"], 1), (2, None, 1),
    (1, None, 0), (1, ["rdkit2d"], 1), (16, ["rdkit2d"], 4), (16, None, 4)])
def test_default_workers_follow_where_the_time_goes(monkeypatch, cores, features, expected):
    # descriptors make featurizing most of the work: every core featurizes; otherwise the model
    # in the main process keeps one
    from graphormer_sepnorm.prediction import engine

    monkeypatch.setattr(engine.os, "sched_getaffinity", lambda pid: set(range(cores)),
                        raising=False)
    featurizer = None if features is None else {"name": "ogb", "mol_features": features}
    assert engine.default_num_workers(featurizer) == expected
