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
    assert not task.scales_targets and dict(task.state_dict()) == {}
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
