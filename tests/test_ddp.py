"""Two-process DDP on the CPU (gloo) through the CLI, against one process on the same batches.

Why the runs are comparable exactly: the tiny ZINC training split has 12 graphs. Under DDP each
process takes batches of 6 and the datamodule hands the epoch's 2 batches out one per process
(``ShardedBatches``), so every step's global batch is the whole training split; the
single-process run takes batches of 12, the same global batch. The synchronized graph-token
BatchNorm normalizes with the global batch's statistics, so its running statistics after 4 steps
must equal the single-process ones to float tolerance. The learning rate is 1e-9, so that the
weights stay at their (seeded, identical) initial values: SepNorm leaves some parameters without
any gradient (the graph-token embedding and the biases whose only effect on the graph token is a
constant that every BatchNorm subtracts; the key biases under softmax), and AdamW turns their
rounding-noise gradients, which differ between any two summation orders, into steps of ~lr that
move the running means by as much. (That the gradients of the synchronized norm equal one
process's is tested in tests/nn/test_distributed_norm.py.) With ``--model.config.sync_batch_norm
false`` each process normalizes with its own 6 graphs and the running means move by ~5e-4.
Evaluation batches of 3 split the 4 test graphs 3 + 1 between the processes: a mean of
per-process MAEs, or a sampler that pads with repeated graphs, would differ from the
single-process ``test/mae`` on the same checkpoint. Batches of 8 make one batch, which is halved
so that each process has one (a process without any used to crash the test).

The 2-process commands run in one subprocess (this file as a script): Lightning's ``ddp``
launcher starts the second process by re-running the script, which it cannot do from inside
pytest; later CLI calls of the script join the same process group.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TINY = ["--config", str(CONFIGS / "zinc_subset.yaml"), "--model.config.num_layers", "2",
        "--model.config.hidden_dim", "16", "--model.config.ffn_dim", "16",
        "--model.config.num_heads", "4",
        "--model.config.dropout", "0", "--model.config.attention_dropout", "0",
        "--model.config.activation_dropout", "0", "--data.eval_batch_size", "3",
        "--model.lr", "1e-9", "--model.end_lr", "1e-9",
        "--trainer.max_steps", "4", "--model.total_steps", "4", "--model.warmup_steps", "1",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        "--trainer.accelerator", "cpu",
        # a checkpoint every epoch (the configs' keeps the best by val/mae, which at this lr
        # may stop improving before the last step), and the statistics' re-estimation
        "--trainer.callbacks", json.dumps([
            {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
             "init_args": {"save_last": True}},
            {"class_path": "graphormer_sepnorm.training.batch_statistics."
                           "ReestimateGraphTokenStatistics"}])]
DDP = ["--trainer.strategy", "ddp", "--trainer.devices", "2", "--data.batch_size", "6"]



def run_args(work: Path, version: str, data: str = "data_ddp") -> list[str]:
    return [*TINY, "--data.root", str(work / data), "--trainer.default_root_dir",
            str(work), "--trainer.logger.init_args.save_dir", str(work / "runs"),
            "--trainer.logger.init_args.name", "ddp", "--trainer.logger.init_args.version",
            version]


def checkpoint(work: Path, version: str) -> Path:
    return work / "runs" / "ddp" / version / "checkpoints" / "last.ckpt"


def ddp_script(work: Path) -> None:
    """The 2-process side: fit (synchronized), test its checkpoint, fit (per-process norm)."""
    from graphormer_sepnorm.cli import main

    main(["fit", *run_args(work, "sync"), *DDP])
    test = main(["test", *run_args(work, "sync"), *DDP, "--trainer.logger.init_args.version",
                 "test", "--ckpt_path", str(checkpoint(work, "sync"))])
    if test.trainer.global_rank == 0:
        metrics = {k: float(v) for k, v in test.trainer.callback_metrics.items()}
        (work / "ddp_test.json").write_text(json.dumps(metrics))
    # one batch of all 4 test graphs: split 2 + 2, so neither process is left without any
    test = main(["test", *run_args(work, "sync"), *DDP, "--trainer.logger.init_args.version",
                 "test_split", "--data.eval_batch_size", "8",
                 "--ckpt_path", str(checkpoint(work, "sync"))])
    if test.trainer.global_rank == 0:
        metrics = {k: float(v) for k, v in test.trainer.callback_metrics.items()}
        (work / "ddp_test_split.json").write_text(json.dumps(metrics))
    main(["fit", *run_args(work, "nosync"), *DDP, "--model.config.sync_batch_norm", "false"])


if __name__ == "__main__":
    ddp_script(Path(sys.argv[1]))
    sys.exit(0)

import pytest  # noqa: E402 (the script above needs none of the test imports)
import torch  # noqa: E402
from tiny_data import write_zinc_raw  # noqa: E402

from graphormer_sepnorm.cli import main  # noqa: E402


def norm_stats(state: dict) -> dict:
    return {k: v for k, v in state.items() if ".cls_norm.running_" in k}


def test_ddp_sync_batch_norm_and_exact_test_metrics(tmp_path, monkeypatch):
    write_zinc_raw(tmp_path / "mirror" / "ZINC" / "raw")
    env = {**os.environ, "GRAPHORMER_SEPNORM_DATA_MIRROR": str(tmp_path / "mirror"),
           "OMP_NUM_THREADS": "1"}
    monkeypatch.setattr("sys.argv", ["graphormer-sepnorm"])
    monkeypatch.setenv("GRAPHORMER_SEPNORM_DATA_MIRROR", str(tmp_path / "mirror"))
    ddp = subprocess.Popen([sys.executable, __file__, str(tmp_path)], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        main(["fit", *run_args(tmp_path, "single", "data_single"), "--data.batch_size", "12"])
        out, _ = ddp.communicate(timeout=600)
    finally:
        ddp.kill()
    assert ddp.returncode == 0, out[-6000:]

    single = torch.load(checkpoint(tmp_path, "single"), weights_only=True)
    sync = torch.load(checkpoint(tmp_path, "sync"), weights_only=True)
    nosync = torch.load(checkpoint(tmp_path, "nosync"), weights_only=True)
    assert single["global_step"] == sync["global_step"] == nosync["global_step"] == 4
    stats = norm_stats(single["state_dict"])
    assert len(stats) == 2 * 4  # attn (not layer 0), ffn of 2 layers + final, mean and var each
    for key, value in stats.items():
        torch.testing.assert_close(sync["state_dict"][key], value, rtol=1e-5, atol=1e-7,
                                   msg=key)
    gaps = [(nosync["state_dict"][k] - v).abs().max().item() for k, v in stats.items()]
    assert max(gaps) > 1e-4, gaps  # 1000x the tolerance above

    ddp_test = json.loads((tmp_path / "ddp_test.json").read_text())
    one = main(["test", *run_args(tmp_path, "test1", "data_single"), "--ckpt_path",
                str(checkpoint(tmp_path, "sync"))])
    split = json.loads((tmp_path / "ddp_test_split.json").read_text())
    for key in ("test/mae", "test/loss"):
        expected = float(one.trainer.callback_metrics[key])
        assert ddp_test[key] == pytest.approx(expected, rel=1e-6, abs=1e-7)
        assert split[key] == pytest.approx(expected, rel=1e-6, abs=1e-7)
