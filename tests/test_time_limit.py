"""Fits cut by ``--trainer.max_time`` or SIGKILL, continued by ``--ckpt_path last``, end where an
uninterrupted fit ends.

Lightning's Timer and the time-interval ``ModelCheckpoint`` read a fake clock here (5 minutes a
training step, :class:`interrupt.FakeMinutes`): the real ``max_time`` and
``train_time_interval`` code paths, at fixed steps. 12 training graphs in batches of 4: 3 steps
an epoch, validated after each, 9 steps in all; dropout on.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_resume import TINY, assert_same_state, load

from graphormer_sepnorm.cli import EXIT_UNFINISHED, main, run
from graphormer_sepnorm.training.resume import stopped_by_time

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TESTS = Path(__file__).resolve().parent
CLOCK = ["--trainer.callbacks+", "interrupt.FakeMinutes"]
PACKED = ["--model.seeds", "[0, 1]"]


def args(tmp_path: Path, name: str, *extra: str) -> list[str]:
    return ["fit", "--config", str(CONFIGS / "zinc_subset.yaml"), *TINY, "--data.root",
            str(tmp_path / "data"), "--trainer.default_root_dir", str(tmp_path),
            "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"),
            "--trainer.logger.init_args.name", name, "--test_best", "false", *CLOCK, *extra]


@pytest.fixture(autouse=True)
def _plain_argv(monkeypatch, tiny_mirror):
    monkeypatch.setattr("sys.argv", ["graphormer-sepnorm"])
    monkeypatch.setenv("GRAPHORMER_SEPNORM_DATA_MIRROR", str(tiny_mirror))


def last_of(cli) -> Path:
    return Path(cli.trainer.checkpoint_callback.dirpath) / "last.ckpt"


def best_val(ckpt: dict, packed: bool) -> list[float]:
    if packed:
        return list(ckpt["replica_best_val"])
    state = next(v for k, v in ckpt["callbacks"].items() if "'val/mae'" in k)
    return [float(state["best_model_score"])]


@pytest.mark.parametrize("packed", [False, True], ids=["single", "packed"])
def test_max_time_stops_and_the_same_command_continues_to_the_same_end(tmp_path, packed):
    extra = PACKED if packed else []
    whole = main(args(tmp_path, "whole", *extra))
    assert whole.trainer.global_step == 9 and not stopped_by_time(whole.trainer)
    # 10 fake minutes a call: 2 steps, stopping mid-epoch (2, 4, 8) and at an epoch's end (6)
    command = args(tmp_path, "cut", *extra, "--trainer.max_time", "00:00:10:00",
                   "--ckpt_path", "last")
    steps = []
    for _ in range(6):
        cli = main(command)
        steps.append(load(last_of(cli))["global_step"])
        if not stopped_by_time(cli.trainer):
            break
    assert steps == [2, 4, 6, 8, 9]
    assert Path(cli.trainer.log_dir).name == "version_0"  # every call continued the first
    cut, uncut = load(last_of(cli)), load(last_of(whole))
    assert_same_state(uncut, cut)
    for key in ("val/mae", "val/loss"):
        assert float(cli.trainer.callback_metrics[key]) == pytest.approx(
            float(whole.trainer.callback_metrics[key]), rel=1e-5, abs=1e-6)
    # each stop validated once more, so the best so far is the best of more validations
    for a, b in zip(best_val(cut, packed), best_val(uncut, packed), strict=True):
        assert a <= b + 1e-6
    if packed:  # each replica's best model, the form `test` takes
        replicas = Path(cli.trainer.log_dir) / "replicas"
        assert sorted(p.name for p in replicas.iterdir()) == ["seed0.ckpt", "seed1.ckpt"]


def test_a_killed_fit_loses_only_the_steps_since_its_time_interval_checkpoint(tmp_path):
    command = args(tmp_path, "killed", "--ckpt_path", "last")
    marker = tmp_path / "killed.txt"
    kill = ["--trainer.callbacks+", "interrupt.KillAtStep", "--trainer.callbacks.step", "5",
            "--trainer.callbacks.marker", str(marker)]
    # the same threads as this process's fits: sums over other thread counts round otherwise
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path]),
           "OMP_NUM_THREADS": str(torch.get_num_threads())}
    proc = subprocess.run([sys.executable, "-m", "graphormer_sepnorm.cli", *command, *kill],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == -9, proc.stderr[-3000:]  # SIGKILL: no exit path ran
    assert marker.is_file()
    last = tmp_path / "runs" / "killed" / "version_0" / "checkpoints" / "last.ckpt"
    # the 10-minute checkpoint at step 4 (after the validation's at step 3): one step lost
    assert load(last)["global_step"] == 4
    resumed = main(command)
    assert resumed.trainer.global_step == 9
    whole = main(args(tmp_path, "whole"))
    assert_same_state(load(last_of(whole)), load(last))


def test_the_console_command_says_unfinished_by_its_exit_status(tmp_path, monkeypatch, capsys):
    command = args(tmp_path, "cut", "--trainer.max_time", "00:00:10:00", "--ckpt_path", "last")
    monkeypatch.setattr("sys.argv", ["graphormer-sepnorm", *command])
    with pytest.raises(SystemExit) as exit_:
        run()
    assert exit_.value.code == EXIT_UNFINISHED
    out = capsys.readouterr().out
    assert "fit stopped by max_time (unfinished) after" in out and " 2 step(s)" in out
    assert "test: not run (stopped by max_time; continue with --ckpt_path last)" in out
