"""Re-estimated graph-token BatchNorm statistics: without dropout, the mean over batches."""

import copy
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from grid.test_store import mixed_graphs
from nn.test_backends import model_pair
from torch.utils._python_dispatch import TorchDispatchMode

from graphormer_sepnorm.data import GraphormerCollator
from graphormer_sepnorm.grid import GridGraphs
from graphormer_sepnorm.nn.sepnorm import GraphTokenBatchNorm
from graphormer_sepnorm.training.batch_statistics import (
    ReestimateGraphTokenStatistics,
    graph_token_norms,
    reestimate_graph_token_statistics,
)
from graphormer_sepnorm.training.packed import PackedReplicas


def statistics(model):
    return {n: b.clone() for n, b in model.named_buffers() if "cls_norm.running" in n}


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_one_batch_gives_its_own_statistics_without_dropout(backend):
    graphs = mixed_graphs()
    batch = GraphormerCollator(5)(graphs)
    reference, cpu = model_pair(torch.float64, multi_hop_max_dist=5, dropout=0.3,
                                attention_dropout=0.3, activation_dropout=0.3)
    model = cpu if backend == "cpu" else reference
    weights = copy.deepcopy(model.state_dict())
    model.train()
    fast_encode = model.fast_encode
    assert reestimate_graph_token_statistics(model, [batch]) == len(graphs)
    # the oracle: the same batch through the reference, each norm in train mode at momentum 1
    # (its statistics replace the running ones) and the rest in eval mode (no dropout)
    oracle = copy.deepcopy(reference)
    oracle.load_state_dict(weights)
    oracle.eval()
    for norm in oracle.modules():
        if isinstance(norm, GraphTokenBatchNorm):
            norm.momentum = 1.0
            norm.train()
    with torch.no_grad():
        oracle(batch)
    expected = statistics(oracle)
    assert expected
    for name, value in statistics(model).items():
        torch.testing.assert_close(value, expected[name], msg=name)
        assert not torch.equal(value, weights[name])  # they did change
    # weights untouched, mode, momentum and backend restored
    for name, value in model.state_dict().items():
        if "cls_norm.running" not in name and "num_batches" not in name:
            assert torch.equal(value, weights[name]), name
    assert model.training and model.fast_encode is fast_encode
    assert all(m.momentum == 0.1 for m in model.modules() if isinstance(m, GraphTokenBatchNorm))


def test_several_batches_average_and_max_graphs_stops():
    graphs = mixed_graphs()
    collate = GraphormerCollator(5)
    batches = [collate(graphs[:5]), collate(graphs[5:])]
    model, _ = model_pair(torch.float64, multi_hop_max_dist=5)
    per_batch = []
    for batch in batches:
        reestimate_graph_token_statistics(model, [batch])
        per_batch.append(statistics(model))
    assert reestimate_graph_token_statistics(model, batches) == len(graphs)
    for name, value in statistics(model).items():
        torch.testing.assert_close(value, (per_batch[0][name] + per_batch[1][name]) / 2)
    assert reestimate_graph_token_statistics(model, batches, max_graphs=3) == 5
    for name, value in statistics(model).items():
        torch.testing.assert_close(value, per_batch[0][name])


def test_models_without_the_batch_norm_are_left_alone():
    model, _ = model_pair(torch.float64, sepnorm=False)
    assert reestimate_graph_token_statistics(model, [GraphormerCollator()(mixed_graphs())]) == 0


def test_callback_in_a_fit_saves_the_reestimated_statistics(tmp_path, tiny_mirror, monkeypatch):
    from test_cli import common

    from graphormer_sepnorm.cli import main

    monkeypatch.setattr("sys.argv", ["graphormer-sepnorm"])
    monkeypatch.setenv("GRAPHORMER_SEPNORM_DATA_MIRROR", str(tiny_mirror))
    # the config has the callback; 12 training graphs in one batch: the estimate does not
    # depend on the batches' order
    cli = main(["fit", *common(tmp_path, "zinc_subset.yaml"), "--data.batch_size", "16",
                "--trainer.max_steps", "2", "--model.warmup_steps", "1",
                "--model.total_steps", "2"])
    best = Path(cli.trainer.checkpoint_callback.best_model_path)
    saved = torch.load(best, weights_only=True)["state_dict"]
    model = copy.deepcopy(cli.model.model)
    model.load_state_dict({k.removeprefix("model."): v for k, v in saved.items()
                           if k.startswith("model.")})
    reestimate_graph_token_statistics(model, cli.datamodule.statistics_dataloader())
    for name, value in statistics(model).items():
        torch.testing.assert_close(saved["model." + name], value, msg=name)
    # training batches left the statistics alone during the fit, and update them again after
    assert all(m.tracks_in_training for m in cli.model.model.modules()
               if isinstance(m, GraphTokenBatchNorm))


def test_callback_reestimates_each_packed_replica(tmp_path, tiny_mirror, monkeypatch):
    from test_cli import CONFIGS, common

    from graphormer_sepnorm.cli import main
    from graphormer_sepnorm.training.module import GraphormerModule

    monkeypatch.setattr("sys.argv", ["graphormer-sepnorm"])
    monkeypatch.setenv("GRAPHORMER_SEPNORM_DATA_MIRROR", str(tiny_mirror))
    preset = str(CONFIGS / "presets" / "gpu_fast.yaml")
    cli = main(["fit", *common(tmp_path, "zinc_subset.yaml", "--config", preset),
                "--model.seeds", "[3, 5]", "--data.batch_size", "16", "--trainer.max_steps",
                "2", "--model.warmup_steps", "1", "--model.total_steps", "2",
                "--trainer.val_check_interval", "2"])
    for seed in (3, 5):
        path = Path(cli.trainer.log_dir) / "replicas" / f"seed{seed}.ckpt"
        replica = GraphormerModule.load_from_checkpoint(path, weights_only=True).model
        saved = statistics(replica)
        reestimate_graph_token_statistics(replica, cli.datamodule.statistics_dataloader())
        for name, value in statistics(replica).items():
            torch.testing.assert_close(saved[name], value, msg=name)


class _CountSyncs(TorchDispatchMode):
    """Counts the operations that read a device value back to the host."""

    def __init__(self):
        super().__init__()
        self.syncs = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.syncs += func in (torch.ops.aten._local_scalar_dense.default,
                               torch.ops.aten.nonzero.default)
        return func(*args, **(kwargs or {}))


def test_packed_replicas_are_reestimated_together_as_each_alone_without_host_syncs():
    store = GridGraphs(mixed_graphs(), multi_hop_max_dist=5)
    batches = [store.batch(torch.arange(5), 32), store.batch(torch.arange(5, 10), 32)]
    models = [model_pair(torch.float64, multi_hop_max_dist=5, dropout=0.3)[0] for _ in range(2)]
    with torch.no_grad():
        models[1].graph_token.add_(1.0)  # another replica, other statistics
    packed = PackedReplicas(models)
    with _CountSyncs() as counter:
        assert reestimate_graph_token_statistics(packed, batches) == 10
    assert counter.syncs == 0
    for index, model in enumerate(models):
        reestimate_graph_token_statistics(model, batches)
        replica = packed.replica(index)
        for name, value in statistics(model).items():
            torch.testing.assert_close(statistics(replica)[name], value, rtol=1e-12,
                                       atol=1e-12, msg=name)
    assert packed.training and packed.skeleton.training
    assert all(m.momentum == 0.1 for m in packed.skeleton.modules()
               if isinstance(m, GraphTokenBatchNorm))


@pytest.mark.parametrize("packed", [False, True])
def test_callback_stops_training_updates_only_in_fits_it_reestimates_in(packed):
    store = GridGraphs(mixed_graphs(), multi_hop_max_dist=5)
    batch = store.batch(torch.arange(5), 32)
    models = [model_pair(torch.float64, multi_hop_max_dist=5)[0] for _ in range(2)]
    model = PackedReplicas(models) if packed else models[0]
    norms = list(graph_token_norms(model).values())
    module = SimpleNamespace(model=model, hparams={"statistics_graphs": 4096})
    callback = ReestimateGraphTokenStatistics()

    def running():
        return statistics(model.replica(1) if packed else model)

    def trains_one_batch():
        before = running()
        model.train()
        model(batch)
        return any(not torch.equal(value, before[name]) for name, value in running().items())

    callback.on_fit_start(SimpleNamespace(datamodule=SimpleNamespace()), module)
    assert norms and all(n.tracks_in_training for n in norms)  # nothing re-estimates them
    fit = SimpleNamespace(datamodule=SimpleNamespace(statistics_dataloader=lambda: [batch]))
    callback.on_fit_start(fit, module)
    assert not any(n.tracks_in_training for n in norms)
    assert not trains_one_batch()
    callback.on_fit_end(fit, module)
    assert all(n.tracks_in_training for n in norms)
    assert trains_one_batch()
    callback.on_fit_start(fit, module)
    callback.on_exception(fit, module, RuntimeError())
    assert all(n.tracks_in_training for n in norms)
    off = SimpleNamespace(model=model, hparams={"statistics_graphs": 0})
    callback.on_fit_start(fit, off)  # --model.statistics_graphs 0: training keeps them
    assert all(n.tracks_in_training for n in norms)
