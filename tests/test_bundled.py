"""The models shipped inside the package: they load safely, carry their cards, and predict."""

from pathlib import Path

import numpy as np
import pytest

from graphormer_sepnorm.checkpoints import FORMAT_KEY, read_checkpoint
from graphormer_sepnorm.nn import GraphormerConfig
from graphormer_sepnorm.predict import predict_smiles
from graphormer_sepnorm.prediction import load_checkpoint
from graphormer_sepnorm.prediction.checkpoints import (
    BUNDLED_CHECKPOINTS,
    bundled_checkpoint_path,
    export_checkpoint,
)

ROOT = Path(__file__).resolve().parents[1]
EXPECTED = {  # name: (target column, metric in the card, featurizer)
    "molhiv": ("hiv_active_probability", "test_roc_auc", "ogb"),
    "molhiv_sharenorm": ("hiv_active_probability", "test_roc_auc", "ogb"),
    "zinc": ("penalized_logp", "test_mae", "zinc"),
    "zinc_sharenorm": ("penalized_logp", "test_mae", "zinc"),
    # the descriptor-pretrained start of configs/smiles_csv.yaml predicts its 174 descriptors
    "pretrained": ("MolWt", "val_mae", "ogb"),
}


def examples() -> list[str]:
    lines = (ROOT / "examples" / "molecules.smi").read_text().splitlines()
    return [line.split()[0] if line.split() else "" for line in lines]


@pytest.mark.parametrize("name", sorted(BUNDLED_CHECKPOINTS))
def test_bundled_model_loads_weights_only_and_predicts_examples(name):
    column, metric, featurizer = EXPECTED[name]
    payload = read_checkpoint(bundled_checkpoint_path(name))  # the current format
    card = payload["model_card"]
    assert card["name"] == name and metric in card and card["steps"] > 0
    assert ("ShareNorm" if name.endswith("sharenorm") else "SepNorm") == card["norm"]
    module = load_checkpoint(name)
    # shipped in the current format: the config as plain values (fields added since then take
    # their defaults), the scaler as the task's
    stored = payload["hyper_parameters"]["config"]
    assert stored == {k: v for k, v in module.config.to_dict().items() if k in stored}
    assert GraphormerConfig.from_dict(stored) == module.config
    assert all(k.startswith(("model.", "task.")) for k in payload["state_dict"])
    assert module.hparams["dataset_info"]["featurizer"]["name"] == featurizer
    assert module.config.sepnorm == (not name.endswith("sharenorm"))
    frame = predict_smiles(examples(), checkpoint=module)
    good = frame["error"] == ""
    # two bad lines in every model; the sodium salt is outside ZINC's vocabulary
    assert (~good).sum() == (3 if featurizer == "zinc" else 2)
    values = frame.loc[good, column].to_numpy(dtype=float)
    assert np.isfinite(values).all() and values.std() > 0
    if column.endswith("probability"):
        assert ((values > 0) & (values < 1)).all()


def test_export_keeps_predictions_and_drops_training_state(tmp_path):
    source = bundled_checkpoint_path("zinc")
    resaved = tmp_path / "again.ckpt"
    export_checkpoint(source, resaved, {"note": "re-exported"})
    payload = read_checkpoint(resaved)
    assert set(payload) == {FORMAT_KEY, "state_dict", "hyper_parameters", "model_card"}
    assert payload["model_card"] == {"note": "re-exported"}
    smiles = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1"]
    a = predict_smiles(smiles, checkpoint="zinc")["penalized_logp"]
    b = predict_smiles(smiles, checkpoint=str(resaved))["penalized_logp"]
    assert np.allclose(a, b, atol=1e-6)
