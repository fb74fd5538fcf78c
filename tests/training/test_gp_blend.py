"""The module's fingerprint-GP blend: when it exists, the blended predictions, checkpoints."""

from types import SimpleNamespace

import pytest
import torch

from graphormer_sepnorm.data.collate import GraphormerBatch
from graphormer_sepnorm.nn.config import GraphormerConfig
from graphormer_sepnorm.training import GraphormerModule
from graphormer_sepnorm.training.gp_blend import blend, make_fingerprint_gp, prepare_gp

MORGAN = {"name": "ogb", "mol_features": ["morgan"]}
INFO = {"task": "regression", "target_names": ["y"], "atom_feature_dims": [5, 3],
        "edge_feature_dims": [4, 2], "featurizer": MORGAN, "mol_feature_dim": 2048}
TINY = GraphormerConfig(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=4)


@pytest.mark.parametrize(("change", "packed"), [
    ({"task": "binary"}, False),
    ({"featurizer": {"name": "ogb"}}, False),
    ({}, True),
])
def test_no_gp_for_classification_without_features_or_for_packed_replicas(change, packed):
    assert make_fingerprint_gp({**INFO, **change}, 0.5, packed) is None
    assert make_fingerprint_gp(INFO, 0.0, False) is None
    assert make_fingerprint_gp(INFO, 0.5, False).slices == {"morgan": (0, 2048)}
    with pytest.raises(ValueError, match=r"gp_weight must be in \[0, 1\]"):
        make_fingerprint_gp(INFO, 1.5, False)


def test_blend_is_the_weighted_mean_once_fitted():
    gp = make_fingerprint_gp(INFO, 0.25, False)
    preds = torch.tensor([[1.0], [2.0]])
    x = torch.zeros(2, 2048)
    x[0, :3] = 1.0
    x[1, 5] = 2.0
    assert blend(preds, gp, 0.25, x) is preds  # unfitted: the network alone
    gp.fit(torch.cat([x, x]), torch.tensor([[0.0], [4.0], [0.5], [3.5]]), steps=5)
    torch.testing.assert_close(blend(preds, gp, 0.25, x), 0.75 * preds + 0.25 * gp(x))
    assert blend(preds, None, 0.25, x) is preds


def _graphs_with_features(n: int) -> list:
    from graphs import random_graph

    graphs = []
    for k in range(n):
        g = random_graph(4 + k % 3, k, y=float(k))
        g.mol_x = torch.zeros(1, 2048)
        g.mol_x[0, k % 7] = 1.0 + k % 2
        graphs.append(g)
    return graphs


def test_fit_start_fits_the_gp_and_checkpoints_carry_it(tmp_path):
    from graphormer_sepnorm import GraphormerCollator, add_shortest_paths

    module = GraphormerModule(INFO, TINY, gp_weight=0.5)
    graphs = add_shortest_paths(_graphs_with_features(14))
    module._trainer = SimpleNamespace(datamodule=SimpleNamespace(
        setup=lambda stage: None, splits={"train": graphs}))
    assert "fitted on 14 molecules" in prepare_gp(module)
    assert prepare_gp(module) is None  # fitted once (a resumed fit keeps its GP)
    module._trainer = None
    module.eval()
    batch: GraphormerBatch = GraphormerCollator()(graphs[:5])
    with torch.no_grad():
        network = module.to_predictions(module.model(batch))
        torch.testing.assert_close(module(batch), 0.5 * network + 0.5 * module.gp(batch.mol_x))
    path = tmp_path / "m.ckpt"
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)},
               path)
    ckpt = torch.load(path, weights_only=True)
    again = GraphormerModule(**ckpt["hyper_parameters"]).eval()
    again.load_state_dict(ckpt["state_dict"])
    with torch.no_grad():
        torch.testing.assert_close(again(batch), module(batch))


def test_too_many_training_molecules_leave_the_gp_off():
    from graphormer_sepnorm import add_shortest_paths

    module = GraphormerModule(INFO, TINY, gp_weight=0.5, gp_max_train=10)
    module._trainer = SimpleNamespace(datamodule=SimpleNamespace(
        setup=lambda stage: None, splits={"train": add_shortest_paths(_graphs_with_features(14))}))
    assert "gp_max_train" in prepare_gp(module) and not module.gp.fitted
    binary = GraphormerModule({**INFO, "task": "binary"}, TINY, gp_weight=0.5)
    assert prepare_gp(binary) == "fingerprint GP off: regression only (task 'binary')"
