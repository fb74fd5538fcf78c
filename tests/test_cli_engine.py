"""The GPU-first engine through the CLI, on the CPU: the preset, bf16-mixed, packed replicas."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_cli import CONFIGS, common

from graphormer_sepnorm.cli import main
from graphormer_sepnorm.compiling import compile_kwargs
from graphormer_sepnorm.data import sequences as attention_sequences
from graphormer_sepnorm.data.device_batches import DeviceBatches
from graphormer_sepnorm.data.resumable import ResumableLoader
from graphormer_sepnorm.prediction import CheckpointError, load_checkpoint
from graphormer_sepnorm.training.factory import load_module
from graphormer_sepnorm.training.module import GraphormerModule
from graphormer_sepnorm.training.packed_module import PackedGraphormerModule

PRESET = str(CONFIGS / "presets" / "gpu_fast.yaml")


@pytest.fixture(autouse=True)
def _plain_argv(monkeypatch, tiny_mirror):
    monkeypatch.setattr("sys.argv", ["graphormer-sepnorm"])
    monkeypatch.setenv("GRAPHORMER_SEPNORM_DATA_MIRROR", str(tiny_mirror))


@pytest.mark.parametrize("config", ["zinc_subset.yaml", "molhiv.yaml"])
def test_gpu_preset_trains_on_the_cpu(tmp_path, config):
    cli = main(["fit", *common(tmp_path, config, "--config", PRESET),
                "--trainer.fast_dev_run", "true"])
    assert cli.trainer.state.finished and cli.trainer.precision == "bf16-mixed"
    assert cli.datamodule.engine == "device"
    loader = cli.datamodule.train_dataloader()
    # on the CPU: the loader's collated batches (what the CPU backend runs fastest), still
    # without the epoch's last incomplete batch, as the grid engine
    assert isinstance(loader, ResumableLoader) and not isinstance(loader, DeviceBatches)
    assert loader.batch_sampler.batches.drop_last
    assert torch.isfinite(cli.trainer.callback_metrics["train/loss"])


def test_bf16_mixed_trains_on_the_cpu(tmp_path):
    bf16 = ("--trainer.precision", "bf16-mixed")
    cli = main(["fit", *common(tmp_path, "zinc_subset.yaml", *bf16),
                "--trainer.max_steps", "3", "--model.warmup_steps", "1",
                "--model.total_steps", "3"])
    assert cli.trainer.state.finished
    assert torch.isfinite(cli.trainer.callback_metrics["val/mae"])
    statistics = [b for n, b in cli.model.named_buffers() if "running" in n]
    assert statistics and all(b.dtype == torch.float32 for b in statistics)


def test_packed_replicas_fit_and_each_replica_checkpoint_works_alone(tmp_path):
    cli = main(["fit", *common(tmp_path, "zinc_subset.yaml", "--config", PRESET),
                "--model.seeds", "[3, 5]", "--trainer.max_steps", "4",
                "--model.warmup_steps", "1", "--model.total_steps", "4",
                "--trainer.val_check_interval", "2", "--trainer.check_val_every_n_epoch", "null"])
    module = cli.model
    assert isinstance(module, PackedGraphormerModule) and module.model.num_replicas == 2
    assert cli.datamodule.replica_seeds == [3, 5]  # linked: each replica its own batches
    # packed: the grid, on the CPU too
    assert isinstance(cli.datamodule.train_dataloader(), DeviceBatches)
    metrics = cli.trainer.callback_metrics
    assert {"val/mae_seed3", "val/mae_seed5", "val/mae"} <= set(metrics)
    assert float(metrics["val/mae"]) == pytest.approx(
        (float(metrics["val/mae_seed3"]) + float(metrics["val/mae_seed5"])) / 2)
    first = module.model.replica(0).state_dict()["head.weight"]
    assert not torch.equal(first, module.model.replica(1).state_dict()["head.weight"])
    replicas = Path(cli.trainer.log_dir) / "replicas"
    saved = torch.load(replicas / "seed3.ckpt", weights_only=True)["replica"]
    assert saved["seed"] == 3 and saved["val_check_interval"] == 2  # recorded with the result
    for seed in (3, 5):
        path = replicas / f"seed{seed}.ckpt"
        single = GraphormerModule.load_from_checkpoint(path, weights_only=True)
        assert type(single) is GraphormerModule and single.hparams.get("seeds") is None
        test = main(["test", *common(tmp_path, "zinc_subset.yaml"), "--ckpt_path", str(path)])
        assert torch.isfinite(test.trainer.callback_metrics["test/mae"])
    # the packed fit's own checkpoints load back as packed modules
    last = Path(cli.trainer.checkpoint_callback.dirpath) / "last.ckpt"
    packed = load_module(last, weights_only=True)
    assert isinstance(packed, PackedGraphormerModule) and packed.seeds == [3, 5]
    with pytest.raises(ValueError, match="PackedGraphormerModule"):  # not a single run's
        GraphormerModule.load_from_checkpoint(last, weights_only=True)
    # with each replica's best so far: a resumed fit compares with it, not with nothing
    assert None not in module.best_val and packed.best_val == module.best_val
    # prediction takes a replica's checkpoint, and says so when given the packed one
    assert load_checkpoint(replicas / "seed3.ckpt").model.config == module.config
    with pytest.raises(CheckpointError, match="replicas/seed"):
        load_checkpoint(last)


def test_packed_replicas_need_the_device_engine(tmp_path):
    with pytest.raises(ValueError, match="engine='device'"):
        main(["fit", *common(tmp_path, "zinc_subset.yaml"), "--model.seeds", "[0, 1]",
              "--trainer.fast_dev_run", "true"])


def test_grid_training_step_traces_as_one_graph():
    """No host synchronization, no graph break: what lets a GPU compile or capture the step."""
    from data.test_grid import mixed_graphs
    from nn.test_backends import model_pair

    from graphormer_sepnorm.data.grid import GridGraphs
    from graphormer_sepnorm.training.packed import PackedReplicas

    graphs = mixed_graphs()
    store = GridGraphs(graphs, multi_hop_max_dist=5)
    single, _ = model_pair(torch.float32, multi_hop_max_dist=5, dropout=0.1)
    other, _ = model_pair(torch.float32, multi_hop_max_dist=5, dropout=0.1)
    packed = PackedReplicas([single, other])
    for model, index in ((single, torch.arange(10)), (packed, torch.arange(10).view(2, 5))):
        def step(index, model=model):
            batch = store.batch(index, 32)
            return (model.train()(batch) - batch.y).abs().mean()

        loss = torch.compile(step, fullgraph=True, backend="eager")(index)
        loss.backward()
        assert torch.isfinite(loss)


def test_compile_option_compiles_the_reference_model(tmp_path, monkeypatch):
    compiled = []

    real_compile = torch.compile

    def eager_compile(fn, *args, **kwargs):  # inductor's C++ build is too slow here
        compiled.append(kwargs.get("options"))
        return real_compile(fn, backend="eager")

    monkeypatch.setattr(torch, "compile", eager_compile)
    cli = main(["fit", *common(tmp_path, "zinc_subset.yaml", "--config", PRESET),
                "--model.backend", "reference", "--model.compile", "default",
                "--trainer.fast_dev_run", "true"])
    # the mode as its options, with the package's inductor workarounds (compiling.py)
    assert cli.trainer.state.finished and compiled == [compile_kwargs("default")["options"]]
    # where the CPU backend runs the model, nothing is compiled
    compiled.clear()
    main(["fit", *common(tmp_path, "zinc_subset.yaml", "--config", PRESET),
          "--model.compile", "default", "--trainer.fast_dev_run", "true"])
    assert compiled == []


def test_a_compiled_packed_fit_compiles_its_step_once_and_evaluates_eagerly(tmp_path,
                                                                            monkeypatch):
    """The preset pads every training batch to the split's longest molecule, so the training
    step compiles once; validation and the statistics pass run eagerly. On an H200 each padded
    length and each evaluation shape compiled anew, about 100 s apiece (2026-11-27)."""
    compiles, real_compile = [], torch.compile

    def recording_compile(fn, *args, **kwargs):
        name = getattr(fn, "__name__", type(fn).__name__)

        def backend(graph, example_inputs):  # no code generation: inductor is slow here
            compiles.append((name, torch.is_grad_enabled()))
            return graph.forward

        return real_compile(fn, backend=backend)

    monkeypatch.setattr(torch, "compile", recording_compile)
    # as on a GPU: on the CPU a packed model is not compiled
    monkeypatch.setattr(PackedGraphormerModule, "_compiles_here", lambda self: True)
    cli = main(["fit", *common(tmp_path, "zinc_subset.yaml", "--config", PRESET),
                "--model.seeds", "[3, 5]",
                "--model.compile", "default", "--trainer.max_steps", "6",
                "--model.warmup_steps", "1", "--model.total_steps", "6",
                "--trainer.val_check_interval", "2", "--trainer.check_val_every_n_epoch", "null"])
    assert cli.trainer.state.finished and cli.datamodule.train_length == "longest"
    store = cli.datamodule._stores["train"]
    batches = list(cli.datamodule.train_dataloader())
    assert {b.node_mask.shape[-1] for b in batches} == {int(store.lengths()[-1])}
    # token rows in attention sequences (train_tokens: sequences), one count of rows and one
    # shape of sequences for the whole fit
    assert cli.datamodule.train_tokens == "sequences"
    size = cli.datamodule.batch_size
    assert {b.row_position.shape for b in batches} == {(2, size + store.atom_rows_for(size))}
    shape = attention_sequences.shape_for(store.sizes, size)
    assert {b.sequence_graph.shape for b in batches} == {(2, *shape)}
    # evaluation and statistics batches, run eagerly, keep their own lengths
    for loader in (cli.datamodule.statistics_dataloader(), cli.datamodule.val_dataloader()):
        assert loader.length is None and loader.atom_rows is None
    # one shape, one compile of the step; the optimizer's own; nothing for evaluation (the
    # model's forward, compiled, would run there)
    assert sorted(compiles) == [("adamw_step_", False), ("training_losses", True)]
    assert torch.isfinite(cli.trainer.callback_metrics["val/mae"])



@pytest.mark.parametrize("switch", ["GRAPHORMER_SEPNORM_TOKEN_ROWS",
                                    "GRAPHORMER_SEPNORM_SEQUENCES"])
def test_switches_turn_rows_or_sequences_off(tmp_path, monkeypatch, switch):
    """``GRAPHORMER_SEPNORM_TOKEN_ROWS=0`` (gpu/run.sh's fallback) turns rows and sequences off:
    the preset's fit trains on the grid, and its batches carry no maps (their gather could be
    what failed). ``GRAPHORMER_SEPNORM_SEQUENCES=0`` turns off the sequences alone."""
    from graphormer_sepnorm.nn import token_rows

    sequences_only = switch == "GRAPHORMER_SEPNORM_SEQUENCES"
    module = attention_sequences if sequences_only else token_rows
    read = subprocess.run([sys.executable, "-c", f"import {module.__name__} as m;"
                           "print(m.ENABLED)"], env={**os.environ, switch: "0"},
                          capture_output=True, text=True, timeout=120, check=True)
    assert read.stdout.strip() == "False" and module.ENABLED
    monkeypatch.setattr(module, "ENABLED", False)
    cli = main(["fit", *common(tmp_path, "zinc_subset.yaml", "--config", PRESET),
                "--model.seeds", "[3, 5]", "--trainer.fast_dev_run", "true"])
    assert cli.trainer.state.finished and cli.datamodule.train_tokens == "sequences"
    assert all((b.row_position is not None) == sequences_only and b.sequence_graph is None
               for b in cli.datamodule.train_dataloader())
