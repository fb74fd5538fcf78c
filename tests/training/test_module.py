from types import SimpleNamespace

import numpy as np
import pytest
import torch
from ogb.graphproppred import Evaluator
from torch_geometric.data import Data

from graphormer_sepnorm import GraphormerCollator, add_shortest_paths
from graphormer_sepnorm.checkpoints import read_checkpoint, stamp
from graphormer_sepnorm.nn.config import GraphormerConfig
from graphormer_sepnorm.training import GraphormerModule

INFO = {"task": "binary", "target_names": ["active"], "atom_feature_dims": [5, 3],
        "edge_feature_dims": [4, 2]}


TINY = {"num_layers": 2, "hidden_dim": 16, "ffn_dim": 16, "num_heads": 4}


def tiny(info=INFO, config=None, **kwargs) -> GraphormerModule:
    return GraphormerModule(info, GraphormerConfig(**TINY, **(config or {})), **kwargs)


def batch_of(graphs, seed=0):
    from graphs import random_graph

    gs = [random_graph(n, seed + k, y=float(k % 2)) for k, n in enumerate(graphs)]
    return GraphormerCollator()(add_shortest_paths(gs))


def test_binary_auroc_equals_ogb_evaluator():
    gen = np.random.default_rng(0)
    y = gen.integers(0, 2, 500)
    scores = gen.normal(size=500) + y  # informative but imperfect
    module = tiny()
    module.test_metrics.update(torch.tensor(scores, dtype=torch.float32)[:, None],
                               torch.tensor(y)[:, None])
    ours = float(module.test_metrics.compute()["roc_auc"])
    ogb = Evaluator("ogbg-molhiv").eval({"y_true": y.reshape(-1, 1),
                                         "y_pred": scores.reshape(-1, 1)})["rocauc"]
    assert ours == pytest.approx(ogb, abs=1e-6)


def test_regression_predictions_are_destandardized():
    info = dict(INFO, task="regression")
    module = tiny(info).eval()
    module.task.set_scaler([3.0], [2.0])
    batch = batch_of([5, 7, 4])
    with torch.no_grad():
        raw = module.model(batch)
        assert torch.allclose(module(batch), raw * 2.0 + 3.0)
        # the L1 loss is taken on standardized targets
        loss = module.task.loss(raw, batch.y)
        assert torch.allclose(loss, (raw - (batch.y - 3.0) / 2.0).abs().mean())


def test_binary_forward_gives_probabilities():
    module = tiny().eval()
    with torch.no_grad():
        p = module(batch_of([6, 3, 9]))
    assert p.shape == (3, 1) and bool(((p > 0) & (p < 1)).all())


def test_checkpoint_hparams_are_plain_and_load_weights_only(tmp_path):
    module = tiny(config={"sepnorm": False}, warmup_steps=0.2)
    path = tmp_path / "m.ckpt"
    torch.save(stamp({"state_dict": module.state_dict(),
                      "hyper_parameters": dict(module.hparams)}), path)
    ckpt = read_checkpoint(path)
    again = GraphormerModule(**ckpt["hyper_parameters"])
    again.load_state_dict(ckpt["state_dict"])
    assert again.hparams["dataset_info"] == INFO
    assert not again.hparams["config"]["sepnorm"] and not again.config.sepnorm
    assert again.config.atom_feature_dims == (5, 3) and again.config.num_tasks == 1


def test_missing_or_bad_dataset_info_is_explained():
    with pytest.raises(ValueError, match="dataset_info is required"):
        GraphormerModule()
    with pytest.raises(ValueError, match="unknown task"):
        tiny(dict(INFO, task="ordinal"))
    with pytest.raises(ValueError, match="needs num_classes"):
        tiny(dict(INFO, task="multiclass"))
    with pytest.raises(ValueError, match="lacks"):
        tiny({"task": "binary"})


def test_multitask_binary_metric_is_mean_auroc():
    module = tiny(dict(INFO, target_names=["a", "b"]))
    y = torch.tensor([[0, 1], [1, 0], [1, 1], [0, 0]])
    scores = torch.tensor([[0.1, 0.9], [0.8, 0.3], [0.7, 0.6], [0.2, 0.4]])
    module.val_metrics.update(scores, y)
    assert float(module.val_metrics.compute()["roc_auc"]) == pytest.approx(1.0)


def test_single_graph_targets_shape():
    g = Data(x=torch.zeros(1, 2, dtype=torch.long), edge_index=torch.zeros(2, 0, dtype=torch.long),
             edge_attr=torch.zeros(0, 2, dtype=torch.long), num_nodes=1, y=torch.tensor([1.0]))
    batch = GraphormerCollator()(add_shortest_paths([g]))
    assert batch.y.shape == (1, 1)


def test_head_lr_is_a_second_group_and_both_follow_one_schedule():
    module = tiny(lr=1e-4, head_lr=1e-3, end_lr=0.0, warmup_steps=2, total_steps=10)
    module.trainer = SimpleNamespace(precision="32-true")
    setup = module.configure_optimizers()
    encoder, head = setup["optimizer"].param_groups
    assert {id(p) for p in head["params"]} == {id(p) for p in module.model.head.parameters()}
    scheduler = setup["lr_scheduler"]["scheduler"]
    for _ in range(6):
        scheduler.step()
    assert head["lr"] / encoder["lr"] == pytest.approx(10.0)
    assert encoder["lr"] == pytest.approx(1e-4 * 4 / 8)  # step 6 of a decay from 2 to 10


def test_an_end_lr_above_lr_is_refused():
    module = tiny(lr=1e-30, head_lr=1e-3, total_steps=10)
    module.trainer = SimpleNamespace(precision="32-true")
    with pytest.raises(ValueError, match="end_lr"):
        module.configure_optimizers()


def test_runs_leave_new_tensors_unfilled_when_deterministic(monkeypatch):
    # a deterministic trainer (the configs' `deterministic: warn`) has PyTorch fill every new
    # tensor with NaN: 2,015 fills in a small CPU training step, 117 without (a FreeSolv batch)
    monkeypatch.setattr(torch.utils.deterministic, "fill_uninitialized_memory", True)
    tiny().setup("test")
    assert torch.utils.deterministic.fill_uninitialized_memory is False
