"""The task metrics: per target on its labelled molecules, their means, in the targets' units."""

import numpy as np
import pytest
import torch
from sklearn.metrics import (
    accuracy_score,
    average_precision_score,
    f1_score,
    r2_score,
    roc_auc_score,
)
from test_module import batch_of, tiny

from graphormer_sepnorm.training.metrics import TaskMetrics, metric_suffix

INFO = {"task": "regression", "target_names": ["logS", "pKa value"],
        "atom_feature_dims": [5, 3], "edge_feature_dims": [4, 2]}


def fed(metrics: TaskMetrics, preds: np.ndarray, y: np.ndarray) -> dict[str, float]:
    for rows in np.array_split(np.arange(len(y)), 4):  # several batches
        metrics.update(torch.tensor(preds[rows], dtype=torch.float32),
                       torch.tensor(y[rows], dtype=torch.float32))
    got = {k: float(v) for k, v in metrics.compute().items()}
    metrics.reset()
    return got


def test_regression_per_target_on_labelled_rows_and_scaled_mean():
    gen = np.random.default_rng(0)
    y = gen.normal(size=(50, 2)) * [1.0, 10.0]
    pred = y + gen.normal(size=(50, 2)) * [0.3, 2.0]
    y[::3, 0] = np.nan  # sparse: every third molecule lacks logS
    y[1::5, 1] = np.nan
    metrics = TaskMetrics("regression", INFO["target_names"])
    metrics.scale = [1.0, 10.0]
    got = fed(metrics, pred, y)
    keep = [~np.isnan(y[:, k]) for k in range(2)]
    mae = [np.abs(pred[keep[k], k] - y[keep[k], k]).mean() for k in range(2)]
    rmse = [np.sqrt(((pred[keep[k], k] - y[keep[k], k]) ** 2).mean()) for k in range(2)]
    r2 = [r2_score(y[keep[k], k], pred[keep[k], k]) for k in range(2)]
    assert got["mae_logS"] == pytest.approx(mae[0], rel=1e-5)
    assert got["mae_pKa_value"] == pytest.approx(mae[1], rel=1e-5)
    # several targets are compared on their training standard deviations
    assert got["mae"] == pytest.approx((mae[0] / 1.0 + mae[1] / 10.0) / 2, rel=1e-5)
    assert got["rmse"] == pytest.approx(np.mean(rmse), rel=1e-5)
    assert got["r2_pKa_value"] == pytest.approx(r2[1], rel=1e-5)
    assert metrics.compute() == {}  # reset


def test_binary_roc_and_pr_auc_per_target_skip_missing_and_one_class_labels():
    gen = np.random.default_rng(1)
    y = gen.integers(0, 2, (80, 3)).astype(float)
    logits = gen.normal(size=(80, 3)) + 1.5 * y
    y[::4, 0] = np.nan
    y[:, 2] = np.where(np.arange(80) % 2, np.nan, 1.0)  # one class only: no ROC-AUC
    got = fed(TaskMetrics("binary", ["a", "b", "c"]), logits, y)
    keep = ~np.isnan(y[:, 0])
    auc = [roc_auc_score(y[keep, 0], logits[keep, 0]), roc_auc_score(y[:, 1], logits[:, 1])]
    assert got["roc_auc_a"] == pytest.approx(auc[0], abs=1e-5)
    assert np.isnan(got["roc_auc_c"]) and np.isnan(got["pr_auc_c"])
    assert got["roc_auc"] == pytest.approx(np.mean(auc), abs=1e-5)  # c left out of the mean
    assert got["pr_auc_b"] == pytest.approx(average_precision_score(y[:, 1], logits[:, 1]),
                                            abs=1e-5)


def test_binary_calibration_error_by_hand():
    gen = np.random.default_rng(1)
    y = gen.integers(0, 2, (80, 1)).astype(float)
    logits = gen.normal(size=(80, 1)) + 1.5 * y
    got = fed(TaskMetrics("binary", ["active"]), logits, y)
    assert set(got) == {"roc_auc", "pr_auc", "ece"}
    # 15 equal-width bins of the probability, |frequency - mean probability| weighted by share
    p = 1 / (1 + np.exp(-logits[:, 0].astype(np.float32)))
    bins = np.clip(np.ceil(p * 15).astype(int) - 1, 0, 14)
    ece = sum(abs(y[bins == b, 0].mean() - p[bins == b].mean()) * (bins == b).mean()
              for b in range(15) if (bins == b).any())
    assert got["ece"] == pytest.approx(ece, abs=1e-5)


def test_multiclass_accuracy_macro_f1_and_one_vs_rest_roc_auc():
    gen = np.random.default_rng(2)
    y = gen.integers(0, 3, (90, 1)).astype(float)
    logits = gen.normal(size=(90, 3))
    logits[np.arange(90), y[:, 0].astype(int)] += 1.0
    y[::7, 0] = np.nan
    got = fed(TaskMetrics("multiclass", ["kind"], num_classes=3), logits, y)
    keep = ~np.isnan(y[:, 0])
    truth, scores = y[keep, 0].astype(int), logits[keep]
    probabilities = np.exp(scores) / np.exp(scores).sum(1, keepdims=True)
    assert got["accuracy"] == pytest.approx(accuracy_score(truth, scores.argmax(1)), abs=1e-6)
    assert got["f1"] == pytest.approx(f1_score(truth, scores.argmax(1), average="macro"),
                                      abs=1e-5)
    assert got["roc_auc"] == pytest.approx(
        roc_auc_score(truth, probabilities, multi_class="ovr", average="macro"), abs=1e-5)


def test_r2_of_one_molecule_is_nan_not_an_error():
    got = fed(TaskMetrics("regression", ["y"]), np.array([[1.0]]), np.array([[2.0]]))
    assert got["rmse"] == pytest.approx(1.0) and np.isnan(got["r2"])


def test_metric_suffix():
    assert metric_suffix("pKa value") == "pKa_value" and metric_suffix("a/b") == "a_b"
    assert metric_suffix("logS") == "logS" and metric_suffix("//") == "target"


def test_module_logs_metrics_in_target_units():
    """The module's test epoch logs mae, rmse and r2 computed on de-standardized predictions."""
    module = tiny(dict(INFO, target_names=["y"])).eval()
    module.task.set_scaler([100.0], [10.0])
    logged = {}
    module.log = lambda name, value, **kw: logged.__setitem__(name, value)
    batch = batch_of([5, 7, 4, 6])
    with torch.no_grad():
        module.test_step(batch, 0)
        pred = module(batch)[:, 0].numpy()
    module.on_test_epoch_end()
    y = batch.y[:, 0].numpy()
    assert float(logged["test/mae"]) == pytest.approx(np.abs(pred - y).mean(), rel=1e-5)
    assert float(logged["test/rmse"]) == pytest.approx(np.sqrt(((pred - y) ** 2).mean()), rel=1e-5)
    assert float(logged["test/r2"]) == pytest.approx(r2_score(y, pred), rel=1e-4)


def test_weighted_mean_of_losses_weights_and_reads_nothing_back():
    from torch.utils._python_dispatch import TorchDispatchMode

    from graphormer_sepnorm.training.metrics import WeightedMean

    class Syncs(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Syncs.count += func is torch.ops.aten._local_scalar_dense.default
            return func(*args, **(kwargs or {}))

    mean = WeightedMean()
    with Syncs():
        mean.update(torch.tensor(1.0), weight=3)
        mean.update(torch.tensor(5.0), weight=1)
    assert Syncs.count == 0
    assert float(mean.compute()) == 2.0  # (3 * 1 + 5) / 4
    mean.update(torch.tensor(float("nan")), weight=1)
    assert torch.isnan(mean.compute())
