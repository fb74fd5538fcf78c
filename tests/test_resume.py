"""A killed fit resumed with ``--ckpt_path last`` ends where an uninterrupted fit ends."""

from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import Callback
from tiny_data import write_zinc_raw

from graphormer_sepnorm.checkpoints import stamp
from graphormer_sepnorm.cli import main, resolve_last

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
# 12 training graphs in batches of 4: 3 steps an epoch, 9 in 3 epochs; dropout stays on (0.1).
TINY = ["--model.config.num_layers", "2", "--model.config.hidden_dim", "16",
        "--model.config.ffn_dim", "16", "--model.config.num_heads", "4", "--data.batch_size", "4",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        "--trainer.max_epochs", "3",
        "--trainer.max_steps", "-1", "--trainer.val_check_interval", "null",
        "--trainer.check_val_every_n_epoch", "1", "--model.warmup_steps", "2",
        "--model.total_steps", "9"]


class Crash(RuntimeError):
    pass


class CrashInSecondEpoch(Callback):
    """Stands for a kill: raises before the second step of the second epoch."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.current_epoch == 1 and batch_idx == 1:
            raise Crash("killed")


class SaveMidEpochThenCrash(Callback):
    """Saves a checkpoint after the first step of the second epoch, then stands for a kill."""

    path = None  # set by the test

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.current_epoch == 1 and batch_idx == 0:
            trainer.save_checkpoint(SaveMidEpochThenCrash.path)
            raise Crash("killed")


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("mirror")
    write_zinc_raw(folder / "ZINC" / "raw")
    return folder


@pytest.fixture(autouse=True)
def _plain_argv(monkeypatch, mirror):
    monkeypatch.setattr("sys.argv", ["graphormer-sepnorm"])
    monkeypatch.setenv("GRAPHORMER_SEPNORM_DATA_MIRROR", str(mirror))


def fit(tmp_path: Path, name: str, *extra: str):
    return main(["fit", "--config", str(CONFIGS / "zinc_subset.yaml"), *TINY,
                 "--data.root", str(tmp_path / "data"), "--trainer.default_root_dir",
                 str(tmp_path), "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"),
                 "--trainer.logger.init_args.name", name, *extra])


@pytest.fixture(scope="module")
def whole(tmp_path_factory, mirror) -> tuple[dict, dict]:
    """The uninterrupted fit: its ``last.ckpt`` and its final metrics."""
    tmp_path = tmp_path_factory.mktemp("whole")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.argv", ["graphormer-sepnorm"])
        patch.setenv("GRAPHORMER_SEPNORM_DATA_MIRROR", str(mirror))
        cli = fit(tmp_path, "whole")
    metrics = {k: float(v) for k, v in cli.trainer.callback_metrics.items()}
    metrics["best"] = float(cli.trainer.checkpoint_callback.best_model_score)
    assert cli.trainer.global_step == 9
    return load(Path(cli.trainer.checkpoint_callback.dirpath) / "last.ckpt"), metrics


def load(path: Path) -> dict:
    return torch.load(path, weights_only=True, map_location="cpu")


def assert_same_state(a: dict, b: dict) -> None:
    assert a["global_step"] == b["global_step"] and a["epoch"] == b["epoch"]
    assert a["state_dict"].keys() == b["state_dict"].keys()
    for key, value in a["state_dict"].items():
        torch.testing.assert_close(b["state_dict"][key], value, rtol=1e-5, atol=1e-6, msg=key)
    exp_avg = [s["exp_avg"] for s in a["optimizer_states"][0]["state"].values()]
    exp_avg_b = [s["exp_avg"] for s in b["optimizer_states"][0]["state"].values()]
    for x, y in zip(exp_avg, exp_avg_b, strict=True):
        torch.testing.assert_close(y, x, rtol=1e-5, atol=1e-6)
    assert a["lr_schedulers"] == b["lr_schedulers"]


def kill_then_resume(tmp_path: Path, name: str):
    with pytest.raises(Crash):
        fit(tmp_path, name, "--trainer.callbacks+", f"{__name__}.CrashInSecondEpoch")
    killed = tmp_path / "runs" / name / "version_0" / "checkpoints" / "last.ckpt"
    assert load(killed)["global_step"] == 3  # the end of the first epoch
    return fit(tmp_path, name, "--ckpt_path", "last"), killed


def test_resumed_fit_ends_like_an_uninterrupted_one(tmp_path, whole):
    resumed, killed = kill_then_resume(tmp_path, "killed")
    # `--ckpt_path last` continued the killed run's version folder, not a new version_1
    assert Path(resumed.trainer.log_dir).name == "version_0"
    assert Path(resumed.trainer.checkpoint_callback.dirpath) == killed.parent
    assert not (tmp_path / "runs" / "killed" / "version_1").exists()
    assert resumed.trainer.global_step == 9
    ckpt, metrics = whole
    assert_same_state(ckpt, load(killed))
    for key in ("val/mae", "val/loss"):
        assert float(resumed.trainer.callback_metrics[key]) == pytest.approx(
            metrics[key], rel=1e-5, abs=1e-6)
    assert float(resumed.trainer.checkpoint_callback.best_model_score) == pytest.approx(
        metrics["best"], rel=1e-5, abs=1e-6)


def test_resumed_mid_epoch_ends_like_an_uninterrupted_one(tmp_path, whole):
    # the training batches resume after the ones the checkpoint had trained on: not the
    # epoch's first batches again (which would end elsewhere: see the control below)
    SaveMidEpochThenCrash.path = str(tmp_path / "mid.ckpt")
    with pytest.raises(Crash):
        fit(tmp_path, "mid", "--trainer.callbacks+", f"{__name__}.SaveMidEpochThenCrash")
    mid = load(tmp_path / "mid.ckpt")
    assert mid["global_step"] == 4
    assert mid["loops"]["fit_loop"]["state_dict"]["combined_loader"] == [
        {"epoch": 1, "batches_done": 1}]
    resumed = fit(tmp_path, "mid", "--ckpt_path", str(tmp_path / "mid.ckpt"))
    assert resumed.trainer.global_step == 9
    last = Path(resumed.trainer.checkpoint_callback.dirpath) / "last.ckpt"
    assert_same_state(whole[0], load(last))
    assert float(resumed.trainer.callback_metrics["val/mae"]) == pytest.approx(
        whole[1]["val/mae"], rel=1e-5, abs=1e-6)


def test_resuming_mid_epoch_from_the_epoch_start_ends_elsewhere(tmp_path, whole):
    """The control: without the saved position the epoch's batches replay from its start."""
    SaveMidEpochThenCrash.path = str(tmp_path / "mid.ckpt")
    with pytest.raises(Crash):
        fit(tmp_path, "mid", "--trainer.callbacks+", f"{__name__}.SaveMidEpochThenCrash")
    ckpt = load(tmp_path / "mid.ckpt")
    del ckpt["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    torch.save(ckpt, tmp_path / "mid.ckpt")
    resumed = fit(tmp_path, "mid", "--ckpt_path", str(tmp_path / "mid.ckpt"))
    last = load(Path(resumed.trainer.checkpoint_callback.dirpath) / "last.ckpt")
    a = whole[0]["state_dict"]
    assert any(not torch.allclose(a[k], last["state_dict"][k], rtol=1e-5, atol=1e-6) for k in a)


def test_dropout_follows_the_checkpointed_seed(tmp_path, whole):
    """The control: dropout is on and its seed comes from the checkpoint, so the equality above
    is not vacuous; another saved seed ends elsewhere."""
    with pytest.raises(Crash):
        fit(tmp_path, "killed", "--trainer.callbacks+", f"{__name__}.CrashInSecondEpoch")
    killed = tmp_path / "runs" / "killed" / "version_0" / "checkpoints" / "last.ckpt"
    ckpt = load(killed)
    assert ckpt["callbacks"]["StepSeeding"] == {"seed": 0}  # seed_everything's
    ckpt["callbacks"]["StepSeeding"]["seed"] = 1
    torch.save(ckpt, killed)
    fit(tmp_path, "killed", "--ckpt_path", "last")
    a, b = whole[0]["state_dict"], load(killed)["state_dict"]
    assert any(not torch.allclose(a[k], b[k], rtol=1e-5, atol=1e-6) for k in a)


def test_ckpt_path_last_without_any_run_starts_afresh_and_test_gets_the_file(tmp_path):
    from jsonargparse import Namespace

    init = Namespace(save_dir=str(tmp_path / "runs"), name="x", version=None)
    config = Namespace(ckpt_path="last", trainer=Namespace(logger=Namespace(init_args=init)))
    resolve_last(config, "fit")
    assert init.version is None and config.ckpt_path == "last"
    last = tmp_path / "runs" / "x" / "version_3" / "checkpoints" / "last.ckpt"
    last.parent.mkdir(parents=True)
    last.write_bytes(b"")
    resolve_last(config, "test")
    assert config.ckpt_path == str(last) and init.version is None
    config.ckpt_path = "last"
    resolve_last(config, "fit")
    assert init.version == "version_3" and config.ckpt_path == "last"
    # `best` outside fit: the best checkpoint the monitoring callback recorded in last.ckpt
    torch.save(stamp({"callbacks": {"ModelCheckpoint{'monitor': None}": {"monitor": None},
                                    "BestCheckpoint{'monitor': 'val/mae'}": {
                                        "monitor": "val/mae",
                                        "best_model_path": "b/best.ckpt"}}}), last)
    config.ckpt_path, init.version = "best", "test"
    resolve_last(config, "test")
    assert config.ckpt_path == "b/best.ckpt"
    config.ckpt_path = "best"
    resolve_last(config, "fit")  # fit has no best to start from: Lightning's error stands
    assert config.ckpt_path == "best"


class SaveEveryStep(Callback):
    """Saves ``s<global step>.ckpt`` into ``folder`` after every training step."""

    folder = None  # set by the test

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        trainer.save_checkpoint(Path(SaveEveryStep.folder) / f"s{trainer.global_step}.ckpt")


def test_packed_fit_resumed_mid_epoch_repeats_every_step(tmp_path):
    # Lightning restores each registered module's mode after a validation by setting its flag;
    # the packed replicas' skeleton is not registered, and stayed in eval mode: replicas
    # trained without dropout until a resume (whose steps then differed). Dropout is on here.
    packed = ["--model.seeds", "[0, 1]",
              "--trainer.callbacks+", f"{__name__}.SaveEveryStep"]
    SaveEveryStep.folder = tmp_path / "whole"
    SaveEveryStep.folder.mkdir()
    fit(tmp_path, "whole", *packed)
    SaveEveryStep.folder = tmp_path / "resumed"
    SaveEveryStep.folder.mkdir()
    fit(tmp_path, "resumed", *packed, "--ckpt_path", str(tmp_path / "whole" / "s4.ckpt"))
    for step in range(5, 10):  # after a mid-epoch resume, across a validation
        a, b = (load(tmp_path / run / f"s{step}.ckpt") for run in ("whole", "resumed"))
        assert a["loops"]["fit_loop"]["state_dict"]["combined_loader"] == \
            b["loops"]["fit_loop"]["state_dict"]["combined_loader"]
        for key, value in a["state_dict"].items():
            assert torch.equal(b["state_dict"][key], value), (step, key)
        for pid, state in a["optimizer_states"][0]["state"].items():
            for name, value in state.items():
                assert torch.equal(b["optimizer_states"][0]["state"][pid][name], value), name
