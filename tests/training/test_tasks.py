"""The task objects: each owns its loss, main metric, predictions and target scaler."""

import pytest
import torch
import torch.nn.functional as F
from torchmetrics.classification import BinaryAUROC, MultilabelAUROC
from torchmetrics.regression import MeanAbsoluteError

from graphormer_sepnorm.training.tasks import BinaryTask, RegressionTask, make_task


def test_regression_standardizes_and_destandardizes():
    task = make_task("regression", ["a", "b"])
    assert isinstance(task, RegressionTask) and task.metric_name == "mae" and task.scales_targets
    task.set_scaler([1.0, -2.0], [2.0, 0.0])  # a zero std is clamped
    assert torch.equal(task.target_std, torch.tensor([2.0, 1e-8]))
    out = torch.tensor([[0.5, 3.0], [1.0, -1.0]])
    y = torch.tensor([[2.0, -2.0], [3.0, -2.0]])
    assert torch.allclose(task.to_predictions(out), out * task.target_std + task.target_mean)
    assert torch.equal(task.metric_inputs(out), task.to_predictions(out))
    standardized = (y - task.target_mean) / task.target_std
    assert torch.allclose(task.loss(out, y), F.l1_loss(out, standardized))
    # the scaler is the task's state, so a module's state_dict carries it
    assert set(task.state_dict()) == {"target_mean", "target_std"}
    metric = task.metric()
    assert isinstance(metric, MeanAbsoluteError)
    task.update_metric(metric, task.metric_inputs(out), y)
    assert float(metric.compute()) == pytest.approx(
        float((task.to_predictions(out) - y).abs().mean()))


def test_binary_uses_logits_for_loss_and_metrics_and_has_no_scaler():
    task = make_task("binary", ["active"])
    assert isinstance(task, BinaryTask) and task.metric_name == "roc_auc"
    # its state: the probabilities' inverse temperature, 1 until calibrated
    assert not task.scales_targets and task.calibrates
    assert dict(task.state_dict()) == {"logit_scale": torch.ones(1)}
    out = torch.tensor([[2.0], [-1.0], [0.5], [-3.0]])
    y = torch.tensor([[1.0], [0.0], [0.0], [1.0]])
    assert torch.allclose(task.to_predictions(out), torch.sigmoid(out))
    assert torch.equal(task.metric_inputs(out), out)
    assert torch.allclose(task.loss(out, y), F.binary_cross_entropy_with_logits(out, y))
    metric = task.metric()
    assert isinstance(metric, BinaryAUROC)
    task.update_metric(metric, out, y)  # [B, 1] to BinaryAUROC's [B]
    assert float(metric.compute()) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="not standardized"):
        task.set_scaler([0.0], [1.0])


def test_multilabel_binary_metric_and_extra_metrics():
    task = make_task("binary", ["a", "b"])
    metric = task.metric()
    assert isinstance(metric, MultilabelAUROC)
    task.update_metric(metric, torch.tensor([[0.1, 0.9], [0.8, 0.3], [0.7, 0.6], [0.2, 0.4]]),
                       torch.tensor([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0], [0.0, 0.0]]))
    assert float(metric.compute()) == pytest.approx(1.0)
    extra = task.extra_metrics()
    assert extra.task == "binary" and extra.names == ["a", "b"]


def test_unknown_task():
    with pytest.raises(ValueError, match="unknown task 'multiclass'"):
        make_task("multiclass", ["y"])


def _overconfident(n: int, sharpness: float, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits ``sharpness * z`` of labels drawn with probability ``sigmoid(z)``."""
    generator = torch.Generator().manual_seed(seed)
    z = torch.randn(n, generator=generator) * 2
    labels = (torch.rand(n, generator=generator) < torch.sigmoid(z)).float()
    return sharpness * z, labels


def _ece(probabilities: torch.Tensor, labels: torch.Tensor) -> float:
    from torchmetrics.functional.classification import binary_calibration_error

    return float(binary_calibration_error(probabilities, labels.long(), n_bins=15))


def test_temperature_scaling_undoes_overconfidence():
    logits, labels = _overconfident(20_000, 3.0)
    task = BinaryTask(["active"])
    raw = task.to_predictions(logits[:, None])[:, 0]
    logged = task.calibrate(logits[:, None], labels[:, None])
    # the logits are 3x too sharp: the fitted inverse temperature is about 1/3
    assert float(task.logit_scale[0]) == pytest.approx(1 / 3, rel=0.05)
    assert torch.equal(logged["logit_scale"], task.logit_scale.mean())
    calibrated = task.to_predictions(logits[:, None])[:, 0]
    assert torch.allclose(calibrated, torch.sigmoid(logits * task.logit_scale[0]))
    assert _ece(calibrated, labels) < 0.02 < 0.1 < _ece(raw, labels)
    # rankings, hence ROC-AUC and PR-AUC, do not move
    scaled = task.metric_inputs(logits[:, None])[:, 0]
    assert bool((scaled[logits.argsort()].diff() >= 0).all())


def test_calibrated_logits_already_calibrated_keep_a_scale_near_one():
    logits, labels = _overconfident(20_000, 1.0, seed=1)
    task = BinaryTask(["active"])
    task.calibrate(logits[:, None], labels[:, None])
    assert float(task.logit_scale[0]) == pytest.approx(1.0, rel=0.05)


def test_calibration_skips_missing_labels_and_one_class_targets():
    logits, labels = _overconfident(4_000, 2.0, seed=2)
    holes = labels.clone()
    holes[::2] = float("nan")
    out = torch.stack([logits, logits], 1)
    y = torch.stack([holes, torch.zeros_like(labels)], 1)  # target 1: one class only
    task = BinaryTask(["a", "b"])
    task.calibrate(out, y)
    alone = BinaryTask(["a"])
    alone.calibrate(logits[1::2, None], labels[1::2, None])
    assert float(task.logit_scale[0]) == float(alone.logit_scale[0]) != 1.0
    assert float(task.logit_scale[1]) == 1.0


def test_a_binary_task_saved_before_calibration_converts_uncalibrated():
    from graphormer_sepnorm.convert import convert_state_dict

    task = BinaryTask(["active"])
    task.logit_scale.fill_(0.5)
    with pytest.raises(RuntimeError, match="logit_scale"):
        task.load_state_dict({})  # an old checkpoint's task had no state: convert it first
    state = convert_state_dict({}, "binary", 1)
    task.load_state_dict({k.removeprefix("task."): v for k, v in state.items()})
    assert torch.equal(task.logit_scale, torch.ones(1))
    out = torch.tensor([[-1.0], [2.0]])
    assert torch.equal(task.to_predictions(out), torch.sigmoid(out))
