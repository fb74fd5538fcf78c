"""The blend beside the network: its arithmetic, its checkpoint entry, the callback that fits it,
and checkpoints from when the module held the GP (they convert and predict as before)."""

from types import SimpleNamespace

import pytest
import torch

from graphormer_sepnorm.checkpoints import FORMAT_KEY
from graphormer_sepnorm.convert import convert
from graphormer_sepnorm.ensemble import callback as callback_module
from graphormer_sepnorm.ensemble.blend import BlendedModel
from graphormer_sepnorm.ensemble.callback import FingerprintGPBlend, why_off
from graphormer_sepnorm.ensemble.fingerprint_gp import FingerprintGP
from graphormer_sepnorm.nn.config import GraphormerConfig
from graphormer_sepnorm.training import GraphormerModule

MORGAN = {"name": "ogb", "mol_features": ["morgan"],
          "mol_feature_columns": {"morgan": [0, 2048]}}
INFO = {"task": "regression", "target_names": ["y"], "atom_feature_dims": [5, 3],
        "edge_feature_dims": [4, 2], "featurizer": MORGAN, "mol_feature_dim": 2048}
TINY = GraphormerConfig(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=4)


def features(n: int) -> torch.Tensor:
    x = torch.zeros(n, 2048)
    for k in range(n):
        x[k, k % 7] = 1.0 + k % 2
    return x


def fitted_gp(n: int = 14) -> FingerprintGP:
    gp = FingerprintGP({"morgan": (0, 2048)}, 1)
    gp.fit(features(n), torch.arange(n, dtype=torch.float).reshape(-1, 1), steps=10)
    return gp


def test_blend_is_the_weighted_mean_and_round_trips_through_a_checkpoint():
    gp, preds, x = fitted_gp(), torch.tensor([[1.0], [2.0]]), features(2)
    blend = BlendedModel(gp, 0.25)
    torch.testing.assert_close(blend.combine(preds, x), 0.75 * preds + 0.25 * gp(x))
    assert BlendedModel(gp, 0.0).combine(preds, x) is preds
    entry = blend.to_checkpoint()
    assert entry["kind"] == "fingerprint_gp" and entry["columns"] == {"morgan": [0, 2048]}
    again = BlendedModel.from_checkpoint(entry)
    torch.testing.assert_close(again.combine(preds, x), blend.combine(preds, x))
    assert BlendedModel.from_checkpoint(entry, weight=1.0).combine(preds, x).equal(gp(x))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        BlendedModel(gp, 1.5)
    with pytest.raises(RuntimeError, match="without a network"):
        BlendedModel(gp, 0.5)(object())


@pytest.mark.parametrize(("change", "packed", "reason"), [
    ({"task": "binary"}, False, "regression only"),
    ({"featurizer": {"name": "ogb"}}, False, "molecule features"),
    ({}, True, "packed replicas"),
])
def test_no_gp_for_classification_without_features_or_for_packed_replicas(change, packed,
                                                                           reason):
    assert reason in why_off({**INFO, **change}, packed)
    assert why_off(INFO, False) is None


def _graphs_with_features(n: int) -> list:
    from graphs import random_graph

    graphs = []
    for k, row in enumerate(features(n)):
        g = random_graph(4 + k % 3, k, y=float(k))
        g.mol_x = row.reshape(1, -1)
        graphs.append(g)
    return graphs


def fake_trainer(graphs):
    return SimpleNamespace(is_global_zero=True, datamodule=SimpleNamespace(
        setup=lambda stage: None, splits={"train": graphs}))


def test_the_callback_fits_at_fit_start_once_and_checkpoints_carry_the_gp(capsys):
    from graphormer_sepnorm import add_shortest_paths

    module = GraphormerModule(INFO, TINY)
    assert not hasattr(module, "gp")  # the network's module holds no GP
    trainer = fake_trainer(add_shortest_paths(_graphs_with_features(14)))
    callback = FingerprintGPBlend(weight=0.5)
    callback.setup(trainer, module, "fit")
    callback.on_fit_start(trainer, module)
    assert "fitted on 14 molecules" in capsys.readouterr().out
    callback.on_fit_start(trainer, module)  # once (a resumed fit keeps its GP)
    assert capsys.readouterr().out == ""
    checkpoint: dict = {}
    callback.on_save_checkpoint(trainer, module, checkpoint)
    restored = FingerprintGPBlend()  # a test or validate: the checkpoint's weight
    restored.on_load_checkpoint(trainer, module, checkpoint)
    assert restored.blend.weight == 0.5
    x = features(3)
    torch.testing.assert_close(restored.blend.gp(x), callback.blend.gp(x))
    overridden = FingerprintGPBlend(weight=0.0)  # --gp.weight 0 at test: the network alone
    overridden.on_load_checkpoint(trainer, module, checkpoint)
    assert overridden.blend.weight == 0.0


def test_too_many_training_molecules_leave_the_gp_off(capsys):
    from graphormer_sepnorm import add_shortest_paths

    module = GraphormerModule(INFO, TINY)
    trainer = fake_trainer(add_shortest_paths(_graphs_with_features(14)))
    callback = FingerprintGPBlend(weight=0.5, max_train=10)
    callback.setup(trainer, module, "fit")
    callback.on_fit_start(trainer, module)
    assert "max_train 10" in capsys.readouterr().out and callback.blend is None
    binary = GraphormerModule({**INFO, "task": "binary"}, TINY)
    FingerprintGPBlend(weight=0.5).setup(trainer, binary, "fit")
    assert "fingerprint GP off: regression only" in capsys.readouterr().out


def test_a_checkpoint_whose_module_held_the_gp_converts_and_blends_as_before():
    # the format from the GP blend's introduction to the ensemble package: the GP's buffers in
    # the module's state_dict (gp.*), its weight among the module's hyperparameters
    from graphormer_sepnorm import GraphormerCollator, add_shortest_paths

    module = GraphormerModule(INFO, TINY).eval()
    gp = fitted_gp()
    old = {"state_dict": {**module.state_dict(),
                          **{f"gp.{k}": v for k, v in gp.state_dict().items()}},
           "hyper_parameters": {**module.hparams, "gp_weight": 0.5, "gp_max_train": 5000}}
    old["hyper_parameters"]["dataset_info"] = {**INFO, "featurizer": {
        "name": "ogb", "mol_features": ["morgan"]}}  # no column record then either
    new = convert(old)
    assert FORMAT_KEY in new and not any(k.startswith("gp.") for k in new["state_dict"])
    assert "gp_weight" not in new["hyper_parameters"] and new["ensemble"]["weight"] == 0.5
    again = GraphormerModule(**new["hyper_parameters"]).eval()
    again.load_state_dict(new["state_dict"])
    blend = BlendedModel.from_checkpoint(new["ensemble"], network=again)
    batch = GraphormerCollator()(add_shortest_paths(_graphs_with_features(5)))
    with torch.no_grad():
        expected = 0.5 * module(batch) + 0.5 * gp(batch.mol_x)
        torch.testing.assert_close(blend(batch), expected, rtol=1e-6, atol=1e-6)


def test_the_fit_passes_its_evidence_rows_to_the_gp(monkeypatch):
    seen = {}
    monkeypatch.setattr(FingerprintGP, "fit", lambda self, x, y, **kw: seen.update(kw))
    assert FingerprintGPBlend(weight=0.5).evidence_rows == 1000
    with pytest.raises(ValueError, match="evidence_rows"):
        FingerprintGPBlend(weight=0.5, evidence_rows=1)
    callback = FingerprintGPBlend(weight=0.5, evidence_rows=None)
    callback.blend = BlendedModel(FingerprintGP({"morgan": (0, 4)}, 1), 0.5)
    monkeypatch.setattr(callback_module, "training_features",
                        lambda datamodule: (torch.zeros(3, 4), torch.zeros(3, 1)))
    callback.on_fit_start(SimpleNamespace(datamodule=None, is_global_zero=True), None)
    assert seen == {"evidence_rows": None}
