"""Where a fit may stop: the look-ahead at Lightning's validations matches the ones it runs."""

import pytest
from conftest import REPO
from lightning.pytorch.callbacks import Callback

from graphormer_sepnorm.campaign.budget import validation_after
from graphormer_sepnorm.cli import main


class Probe(Callback):
    """After every batch, what validation_after says of the next three; every validation."""

    said: dict[int, list[bool]] = {}
    validated: list[int] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        Probe.said[trainer.global_step] = [validation_after(trainer, k) for k in range(3)]

    def on_validation_start(self, trainer, pl_module):
        if not trainer.sanity_checking:
            Probe.validated.append(trainer.global_step)


@pytest.mark.parametrize("schedule", [
    ["--trainer.val_check_interval", "4", "--trainer.check_val_every_n_epoch", "null"],
    ["--trainer.val_check_interval", "null", "--trainer.check_val_every_n_epoch", "1"],
    ["--trainer.val_check_interval", "null", "--trainer.check_val_every_n_epoch", "2"],
    ["--trainer.val_check_interval", "2", "--trainer.check_val_every_n_epoch", "1"],
])
def test_validation_after_foresees_every_validation(tmp_path, tiny_mirror, monkeypatch,
                                                    schedule):
    monkeypatch.setattr("sys.argv", ["graphormer-sepnorm"])
    monkeypatch.setenv("GRAPHORMER_SEPNORM_DATA_MIRROR", str(tiny_mirror))
    Probe.said, Probe.validated = {}, []
    # 12 training graphs in batches of 4: 3 steps an epoch, 13 steps
    main(["fit", "--config", str(REPO / "configs" / "zinc_subset.yaml"), "--data.root",
          str(tmp_path / "data"), "--trainer.default_root_dir", str(tmp_path),
          "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"),
          "--model.config.num_layers", "1", "--model.config.hidden_dim", "8",
          "--model.config.ffn_dim", "8", "--model.config.num_heads", "2",
          "--data.batch_size", "4", "--trainer.max_steps", "13", "--trainer.max_epochs", "-1",
          "--trainer.enable_progress_bar", "false", *schedule,
          "--trainer.callbacks+", f"{__name__}.Probe", "--test_best", "false"])
    assert Probe.validated, "the schedule validated"
    steps = sorted(Probe.said)
    assert steps == list(range(1, 14))
    assert [s for s in steps if Probe.said[s][0]] == Probe.validated
    for step in steps[:-2]:  # looking ahead says what the later batches then said
        assert Probe.said[step][1:] == [Probe.said[step + 1][0], Probe.said[step + 2][0]]


def test_a_one_off_slow_step_does_not_count_as_the_pace(tmp_path):
    """A step that compiled a new padded length (seconds, on a GPU) neither enters the running
    average nor stands for the steps to come; a lasting slowdown does."""
    from graphormer_sepnorm.campaign.budget import ONE_OFF, CampaignCheckpoint
    from graphormer_sepnorm.campaign.state import JobState

    callback = CampaignCheckpoint(JobState(tmp_path / "job", ["fit"]), [0], deadline=1e9)
    assert callback.step_estimate(0.5) == 0.5  # nothing measured yet: the step itself
    for _ in range(20):
        callback._observe(0.01)
    assert callback.steps_per_s == pytest.approx(100.0)
    callback._observe(7.0)  # a recompile
    assert callback.steps_per_s == pytest.approx(100.0)
    assert callback.step_estimate(7.0) == pytest.approx(0.01)
    assert callback.step_estimate(0.03) == pytest.approx(0.03)  # slower, not a one-off
    assert callback.step_estimate(ONE_OFF * 0.01) == pytest.approx(ONE_OFF * 0.01)
    for _ in range(60):  # the pace itself changes: the average follows
        callback._observe(0.04)
    assert callback.steps_per_s == pytest.approx(25.0, rel=0.01)


def test_three_slow_steps_in_a_row_are_the_new_pace(tmp_path):
    from graphormer_sepnorm.campaign.budget import CampaignCheckpoint
    from graphormer_sepnorm.campaign.state import JobState

    callback = CampaignCheckpoint(JobState(tmp_path / "job", ["fit"]), [0], deadline=1e9)
    for _ in range(5):
        callback._observe(0.01)
    callback._observe(1.0)
    callback._observe(1.0)
    assert callback.steps_per_s == pytest.approx(100.0)
    callback._observe(1.0)  # the third: the steps are this slow now
    assert callback.steps_per_s == pytest.approx(1.0)
    assert callback.step_estimate(1.0) == pytest.approx(1.0)
