"""The task objects: each owns its loss (over labelled cells), predictions and calibration."""

import pytest
import torch
import torch.nn.functional as F

from graphormer_sepnorm.training.tasks import (
    BinaryTask,
    MulticlassTask,
    RegressionTask,
    inverse_temperature,
    make_task,
)

NAN = float("nan")


def test_regression_standardizes_and_destandardizes():
    task = make_task("regression", ["a", "b"])
    assert isinstance(task, RegressionTask) and task.metric_name == "mae" and task.scales_targets
    assert task.mode == "min"
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


@pytest.mark.parametrize("name", ["regression", "binary", "multiclass"])
def test_the_masked_loss_is_the_loss_on_the_labelled_cells_alone(name):
    generator = torch.Generator().manual_seed(0)
    y = torch.randint(0, 3, (6, 2), generator=generator).float()
    if name == "binary":
        y = (y > 0).float()
    y[0, 1] = y[3, 0] = y[4, 0] = y[4, 1] = NAN  # molecule 4 has no label at all
    task = make_task(name, ["a", "b"], num_classes=3 if name == "multiclass" else None)
    width = 6 if name == "multiclass" else 2
    out = torch.randn(6, width, generator=generator)
    present = ~y.isnan()
    if name == "regression":
        task.set_scaler([0.5, 1.0], [2.0, 3.0])
        z = (y - task.target_mean) / task.target_std
        expected = F.l1_loss(out[present], z[present])
    elif name == "binary":
        expected = F.binary_cross_entropy_with_logits(out[present], y[present])
    else:
        logits = out.view(6, 2, 3)[present]
        expected = F.cross_entropy(logits, y[present].long())
    assert torch.allclose(task.loss(out, y), expected)
    # under vmap too (packed replicas): no boolean indexing, no host synchronization
    stacked = torch.vmap(task.loss, in_dims=(0, None))(torch.stack([out, out]), y)
    assert torch.allclose(stacked, expected.expand(2))
    assert float(task.loss(out, torch.full_like(y, NAN))) == 0.0  # nothing labelled


def test_binary_uses_logits_for_loss_and_metrics_and_has_no_scaler():
    task = make_task("binary", ["active"])
    assert isinstance(task, BinaryTask) and task.metric_name == "roc_auc" and task.mode == "max"
    # its state: the probabilities' inverse temperature, 1 until calibrated
    assert not task.scales_targets and task.calibrates
    assert dict(task.state_dict()) == {"logit_scale": torch.ones(1)}
    out = torch.tensor([[2.0], [-1.0], [0.5], [-3.0]])
    y = torch.tensor([[1.0], [0.0], [0.0], [1.0]])
    assert torch.allclose(task.to_predictions(out), torch.sigmoid(out))
    assert torch.equal(task.metric_inputs(out), out)
    assert torch.allclose(task.loss(out, y), F.binary_cross_entropy_with_logits(out, y))
    with pytest.raises(ValueError, match="not standardized"):
        task.set_scaler([0.0], [1.0])


def test_multiclass_predicts_probabilities_summing_to_one_per_label():
    task = make_task("multiclass", ["kind", "grade"], num_classes=3)
    assert isinstance(task, MulticlassTask) and task.num_classes == 3 and task.mode == "max"
    out = torch.randn(5, 6)
    probabilities = task.to_predictions(out)
    assert probabilities.shape == (5, 6)
    torch.testing.assert_close(probabilities.view(5, 2, 3).sum(-1), torch.ones(5, 2))
    torch.testing.assert_close(probabilities[:, 3:], F.softmax(out[:, 3:], dim=1))
    task.logit_scale.copy_(torch.tensor([1.0, 0.5]))
    torch.testing.assert_close(task.to_predictions(out)[:, 3:], F.softmax(out[:, 3:] / 2, dim=1))
    with pytest.raises(ValueError, match="needs num_classes"):
        make_task("multiclass", ["kind"])
    with pytest.raises(ValueError, match="at least 2 classes"):
        MulticlassTask(["kind"], 1)


def test_multiclass_temperature_undoes_overconfidence():
    generator = torch.Generator().manual_seed(3)
    z = torch.randn(20_000, 3, generator=generator) * 2
    labels = torch.multinomial(F.softmax(z, dim=1), 1, generator=generator)[:, 0]
    task = MulticlassTask(["kind"], 3)
    task.calibrate(3.0 * z, labels[:, None].float())
    assert float(task.logit_scale[0]) == pytest.approx(1 / 3, rel=0.05)
    # two classes (-x/2, x/2) are the binary case
    x = torch.tensor([2.0, -1.0, 0.5, -3.0, 1.0], dtype=torch.float64)
    binary = torch.tensor([1, 0, 0, 1, 1])
    assert inverse_temperature(torch.stack([-x, x], 1) / 2, binary) > 0


def test_unknown_task():
    with pytest.raises(ValueError, match="unknown task 'ordinal'"):
        make_task("ordinal", ["y"])


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
