"""The grid engine and the GPU preset through the CLI, on the CPU: bf16, packed, compiled.

Inductor's C++ code generation takes minutes here, so ``torch.compile`` is traced with a
backend that generates no code; what is compiled, and how often, is recorded.
"""

from pathlib import Path

import pytest
import torch
from test_cli import CONFIGS, common

from graphormer_sepnorm.cli import main
from graphormer_sepnorm.grid import DeviceBatches, GridEngine
from graphormer_sepnorm.nn.compiling import compile_kwargs
from graphormer_sepnorm.prediction import CheckpointError, load_checkpoint
from graphormer_sepnorm.training.factory import load_module
from graphormer_sepnorm.training.from_checkpoint import checkpoint_data
from graphormer_sepnorm.training.module import GraphormerModule
from graphormer_sepnorm.training.packed_module import PackedGraphormerModule

PRESET = str(CONFIGS / "presets" / "gpu_fast.yaml")


@pytest.fixture(autouse=True)
def _plain_argv(monkeypatch, tiny_mirror):
    monkeypatch.setattr("sys.argv", ["graphormer-sepnorm"])
    monkeypatch.setenv("GRAPHORMER_SEPNORM_DATA_MIRROR", str(tiny_mirror))


@pytest.fixture
def compiles(monkeypatch) -> list[tuple[str, dict, bool]]:
    """``torch.compile`` without code generation; each graph traced is recorded as
    (function name, options, grad mode)."""
    calls, real_compile = [], torch.compile

    def recording_compile(fn, *args, **kwargs):
        name = getattr(fn, "__name__", type(fn).__name__)
        options = kwargs.get("options")

        def backend(graph, example_inputs):
            calls.append((name, options, torch.is_grad_enabled()))
            return graph.forward

        return real_compile(fn, backend=backend)

    monkeypatch.setattr(torch, "compile", recording_compile)
    return calls


@pytest.mark.parametrize("config", ["zinc_subset.yaml", "molhiv.yaml"])
def test_gpu_preset_trains_on_the_cpu(tmp_path, config, compiles):
    cli = main(["fit", *common(tmp_path, config, "--config", PRESET),
                "--trainer.fast_dev_run", "true"])
    assert cli.trainer.state.finished and cli.trainer.precision == "bf16-mixed"
    engine = cli.datamodule.engine
    assert isinstance(engine, GridEngine) and engine.train_length == "longest"
    batches = cli.datamodule.train_dataloader()
    assert isinstance(batches, DeviceBatches) and batches.length == int(
        engine._stores["train"].lengths()[-1])
    assert torch.isfinite(cli.trainer.callback_metrics["train/loss"])
    # the model compiled with the package's inductor settings, its training step traced
    options = compile_kwargs("reduce-overhead")["options"]
    assert compiles and all(given == options for _, given, _ in compiles)


def test_bf16_mixed_trains_on_the_cpu(tmp_path):
    bf16 = ("--trainer.precision", "bf16-mixed")
    cli = main(["fit", *common(tmp_path, "zinc_subset.yaml", *bf16),
                "--trainer.max_steps", "3", "--model.warmup_steps", "1",
                "--model.total_steps", "3"])
    assert cli.trainer.state.finished
    assert torch.isfinite(cli.trainer.callback_metrics["val/mae"])
    statistics = [b for n, b in cli.model.named_buffers() if "running" in n]
    assert statistics and all(b.dtype == torch.float32 for b in statistics)


def test_packed_replicas_fit_and_each_replica_checkpoint_works_alone(tmp_path, compiles):
    cli = main(["fit", *common(tmp_path, "zinc_subset.yaml", "--config", PRESET),
                "--model.seeds", "[3, 5]", "--trainer.max_steps", "4",
                "--model.warmup_steps", "1", "--model.total_steps", "4",
                "--trainer.val_check_interval", "2", "--trainer.check_val_every_n_epoch", "null"])
    module = cli.model
    assert isinstance(module, PackedGraphormerModule) and module.model.num_replicas == 2
    batches = cli.datamodule.train_dataloader()  # each replica its own batches
    assert isinstance(batches, DeviceBatches) and len(batches.sampler) == 2
    assert all(batch.stacked for batch in batches)
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


def test_packed_replicas_without_an_engine_take_the_grid_engine(tmp_path):
    cli = main(["fit", *common(tmp_path, "zinc_subset.yaml"), "--model.seeds", "[0, 1]",
                "--trainer.fast_dev_run", "true"])
    assert cli.trainer.state.finished
    engine = cli.datamodule.engine
    assert isinstance(engine, GridEngine) and engine.train_length == "bucketed"


def test_grid_training_step_traces_as_one_graph():
    """No host synchronization, no graph break: what lets a GPU compile or capture the step."""
    from grid.test_store import mixed_graphs
    from nn.test_backends import model_pair

    from graphormer_sepnorm.grid import GridGraphs
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


@pytest.mark.parametrize("backend", ["reference", "auto"])
def test_compile_option_compiles_the_model(tmp_path, compiles, backend):
    """With the package's inductor settings; on the CPU wing (``auto`` on CPU tensors) the
    encoder runs eagerly inside the compiled model (its C kernels do not trace)."""
    cli = main(["fit", *common(tmp_path, "zinc_subset.yaml"), "--model.backend", backend,
                "--model.compile", "default", "--trainer.fast_dev_run", "true"])
    assert cli.trainer.state.finished and cli.model.model.backend == backend
    options = compile_kwargs("default")["options"]
    assert compiles and all(given == options for _, given, _ in compiles)


def test_a_compiled_packed_fit_compiles_its_step_once_and_evaluates_eagerly(tmp_path,
                                                                            compiles):
    """The preset pads every training batch to the split's longest molecule, so the training
    step compiles once; validation and the statistics pass run eagerly (each of their shapes
    would compile anew)."""
    cli = main(["fit", *common(tmp_path, "zinc_subset.yaml", "--config", PRESET),
                "--model.seeds", "[3, 5]",
                "--model.compile", "default", "--trainer.max_steps", "6",
                "--model.warmup_steps", "1", "--model.total_steps", "6",
                "--trainer.val_check_interval", "2", "--trainer.check_val_every_n_epoch", "null"])
    engine = cli.datamodule.engine
    assert cli.trainer.state.finished and engine.train_length == "longest"
    batches = list(cli.datamodule.train_dataloader())
    assert {b.node_mask.shape[-1] for b in batches} == {int(engine._stores["train"].lengths()[-1])}
    # evaluation and statistics batches, run eagerly, keep their own lengths
    for loader in (cli.datamodule.statistics_dataloader(), cli.datamodule.val_dataloader()):
        assert loader.length is None
    # one shape, one compile of the step (the optimizer is torch's fused AdamW, not compiled);
    # nothing for evaluation (the model's forward, compiled, would run there)
    assert sorted((name, grad) for name, _, grad in compiles) == [("training_losses", True)]
    assert torch.isfinite(cli.trainer.callback_metrics["val/mae"])


def test_a_checkpoint_restores_its_switches(tmp_path):
    """The backend (the model's) and the engine (the data's) are saved as plain values and
    come back with the checkpoint: ``test --ckpt_path`` alone runs as the fit did."""
    cli = main(["fit", *common(tmp_path, "zinc_subset.yaml"), "--model.backend", "reference",
                "--data.init_args.engine", "GridEngine",
                "--data.init_args.engine.train_length", "longest",
                "--trainer.max_steps", "2", "--test_best", "false"])
    last = Path(cli.trainer.checkpoint_callback.dirpath) / "last.ckpt"
    payload = torch.load(last, weights_only=True)
    assert payload["hyper_parameters"]["backend"] == "reference"
    assert checkpoint_data(last)["init_args"]["engine"] == {
        "class_path": "graphormer_sepnorm.grid.engine.GridEngine",
        "init_args": {"train_length": "longest", "length_multiple": 8}}
    assert load_module(last, weights_only=True).model.backend == "reference"
    test = main(["test", "--ckpt_path", str(last), "--trainer.default_root_dir", str(tmp_path)])
    assert test.model.model.backend == "reference"
    assert isinstance(test.datamodule.engine, GridEngine)
    assert test.datamodule.engine.train_length == "longest"
