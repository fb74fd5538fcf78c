"""The campaign's step profile: a few steps of the fit itself, once, and never at its cost."""

import pytest
import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch.utils.data import DataLoader

from graphormer_sepnorm.campaign.step_profile import StepProfile


class Tiny(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return DataLoader(torch.randn(256, 4), batch_size=4)


class StopAt(Callback):
    """Raises after ``step`` steps, as a spent budget does."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step >= self.step:
            raise RuntimeError("budget spent")


def fit(*callbacks: Callback, max_steps: int = 20) -> None:
    trainer = Trainer(max_steps=max_steps, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False,
                      accelerator="cpu", callbacks=list(callbacks))
    trainer.fit(Tiny())


def test_the_profiled_steps_are_reported_once(tmp_path):
    path = tmp_path / "job" / "profile-abc.txt"  # the job's folder is made by its first save
    fit(StepProfile(path, "tiny at abc", after=3, steps=4))
    report = path.read_text()
    assert report.startswith("4 steps in ") and "## tiny at abc (4 steps)" in report
    assert "per step:" in report and "aten::addmm" in report
    path.write_text("kept")
    fit(StepProfile(path, "tiny at abc", after=3, steps=4))  # once per job and code
    assert path.read_text() == "kept"


def test_a_fit_stopped_mid_profile_reports_what_it_profiled(tmp_path):
    path = tmp_path / "profile.txt"
    with pytest.raises(RuntimeError, match="budget spent"):
        fit(StepProfile(path, "tiny", after=2, steps=10), StopAt(5))
    assert path.read_text().startswith("3 steps in ")


def test_a_failing_profiler_is_written_down_and_the_fit_goes_on(tmp_path, monkeypatch):
    class Broken:
        def __init__(self, **kwargs) -> None:
            pass

        def __enter__(self):
            raise RuntimeError("CUPTI unavailable")

    monkeypatch.setattr(torch.profiler, "profile", Broken)
    path = tmp_path / "profile.txt"
    fit(StepProfile(path, "tiny", after=2, steps=4), max_steps=10)
    assert "the profiler failed: RuntimeError('CUPTI unavailable')" in path.read_text()


def test_a_report_that_cannot_be_written_leaves_the_fit_alone(tmp_path, capsys):
    """Neither the report nor the error fits where it should go: stderr says so, the fit ends."""
    (tmp_path / "job").write_text("a file where the job's folder should be")
    fit(StepProfile(tmp_path / "job" / "profile.txt", "tiny", after=2, steps=4), max_steps=10)
    assert "tiny: the profiler failed: FileExistsError" in capsys.readouterr().err
