"""Training batches through Lightning: a new draw each epoch, and a mid-epoch position."""

from pathlib import Path

import pytest
from lightning.pytorch.callbacks import Callback

from graphormer_sepnorm.cli import main
from graphormer_sepnorm.data.resumable import ResumableBatchSampler
from graphormer_sepnorm.data.sampler import SizeGroupedBatchSampler

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_resume_at_skips_the_done_batches_of_that_epoch_once():
    sampler = ResumableBatchSampler(SizeGroupedBatchSampler([3] * 10, 2, seed=5))
    sampler.set_epoch(2)
    epoch2 = list(sampler)
    sampler.resume_at(2, 3)
    assert list(sampler) == epoch2[3:]
    assert list(sampler) == epoch2  # once only
    sampler.resume_at(2, 3)
    sampler.set_epoch(3)  # another epoch: nothing to skip
    assert list(sampler) == list(SizeGroupedBatchSampler([3] * 10, 2, seed=8))
    assert len(sampler) == 5 and sampler.sampler is sampler


class RecordBatches(Callback):
    """Each training batch's targets, per epoch (the tiny ZINC targets are distinct)."""

    seen: dict[int, list[tuple[float, ...]]] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        key = tuple(sorted(round(v, 4) for v in batch.y.flatten().tolist()))
        RecordBatches.seen.setdefault(trainer.current_epoch, []).append(key)


@pytest.mark.parametrize("engine", ["null", "GridEngine"])
def test_lightning_draws_new_batches_every_epoch(tmp_path, tiny_mirror, monkeypatch, engine):
    # Lightning sets the epoch of `loader.batch_sampler.sampler`, not of the batch sampler a
    # DataLoader was given: before ResumableBatchSampler.sampler, the DataLoader drew the
    # first epoch's batches in every epoch.
    monkeypatch.setattr("sys.argv", ["graphormer-sepnorm"])
    monkeypatch.setenv("GRAPHORMER_SEPNORM_DATA_MIRROR", str(tiny_mirror))
    RecordBatches.seen = {}
    main(["fit", "--config", str(CONFIGS / "zinc_subset.yaml"), "--data.root",
          str(tmp_path / "data"), "--trainer.default_root_dir", str(tmp_path),
          "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"),
          "--model.config.num_layers", "1", "--model.config.hidden_dim", "8",
          "--model.config.ffn_dim", "8", "--model.config.num_heads", "2",
          "--data.batch_size", "4", "--data.init_args.engine", engine,
          "--trainer.max_epochs", "3", "--trainer.max_steps", "-1",
          "--trainer.limit_val_batches", "0", "--trainer.enable_progress_bar", "false",
          "--trainer.callbacks+", f"{__name__}.RecordBatches", "--test_best", "false"])
    epochs = RecordBatches.seen
    assert sorted(epochs) == [0, 1, 2] and all(len(b) == 3 for b in epochs.values())
    for batches in epochs.values():  # each epoch covers the 12 training graphs once
        assert len({v for batch in batches for v in batch}) == 12
    assert len({tuple(batches) for batches in epochs.values()}) == 3
