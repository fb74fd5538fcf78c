"""The metrics beside the main one: RMSE, R^2 and PR-AUC, per target, in the targets' units."""

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, r2_score, roc_auc_score
from test_module import batch_of, tiny

from graphormer_sepnorm.training.metrics import ExtraMetrics, metric_suffix

INFO = {"task": "regression", "target_names": ["logS", "pKa value"],
        "atom_feature_dims": [5, 3], "edge_feature_dims": [4, 2]}


def test_regression_rmse_r2_per_target_and_mean():
    gen = np.random.default_rng(0)
    y = gen.normal(size=(50, 2)) * [1.0, 10.0]
    pred = y + gen.normal(size=(50, 2)) * [0.3, 2.0]
    extra = ExtraMetrics("regression", INFO["target_names"])
    for rows in np.array_split(np.arange(50), 4):  # several batches
        extra.update(torch.tensor(pred[rows], dtype=torch.float32),
                     torch.tensor(y[rows], dtype=torch.float32))
    got = {k: float(v) for k, v in extra.compute().items()}
    rmse = np.sqrt(((pred - y) ** 2).mean(0))
    r2 = [r2_score(y[:, k], pred[:, k]) for k in range(2)]
    mae = np.abs(pred - y).mean(0)
    assert got["rmse"] == pytest.approx(rmse.mean(), rel=1e-5)
    assert got["r2"] == pytest.approx(np.mean(r2), rel=1e-5)
    assert got["rmse_logS"] == pytest.approx(rmse[0], rel=1e-5)
    assert got["rmse_pKa_value"] == pytest.approx(rmse[1], rel=1e-5)
    assert got["r2_pKa_value"] == pytest.approx(r2[1], rel=1e-5)
    assert got["mae_logS"] == pytest.approx(mae[0], rel=1e-5)
    assert extra.compute() == {}  # reset after compute


def test_binary_pr_auc_and_calibration_error_single_and_per_target():
    gen = np.random.default_rng(1)
    y = gen.integers(0, 2, (80, 2))
    logits = gen.normal(size=(80, 2)) + 1.5 * y
    one = ExtraMetrics("binary", ["active"])
    one.update(torch.tensor(logits[:, :1], dtype=torch.float32), torch.tensor(y[:, :1]))
    got = one.compute()
    assert set(got) == {"pr_auc", "ece"}
    assert float(got["pr_auc"]) == pytest.approx(average_precision_score(y[:, 0], logits[:, 0]),
                                                 abs=1e-5)
    # ECE by hand: 15 equal-width bins of the probability, |frequency - mean probability|
    # weighted by the bin's share of molecules
    p = 1 / (1 + np.exp(-logits[:, 0].astype(np.float32)))
    bins = np.clip(np.ceil(p * 15).astype(int) - 1, 0, 14)
    ece = sum(abs(y[bins == b, 0].mean() - p[bins == b].mean()) * (bins == b).mean()
              for b in range(15) if (bins == b).any())
    assert float(got["ece"]) == pytest.approx(ece, abs=1e-5)
    two = ExtraMetrics("binary", ["a", "b"])
    two.update(torch.tensor(logits, dtype=torch.float32), torch.tensor(y))
    got = {k: float(v) for k, v in two.compute().items()}
    ap = [average_precision_score(y[:, k], logits[:, k]) for k in range(2)]
    assert got["pr_auc"] == pytest.approx(np.mean(ap), abs=1e-5)
    assert got["pr_auc_b"] == pytest.approx(ap[1], abs=1e-5)
    assert got["roc_auc_a"] == pytest.approx(roc_auc_score(y[:, 0], logits[:, 0]), abs=1e-5)


def test_r2_of_one_molecule_is_nan_not_an_error():
    extra = ExtraMetrics("regression", ["y"])
    extra.update(torch.tensor([[1.0]]), torch.tensor([[2.0]]))
    got = extra.compute()
    assert float(got["rmse"]) == pytest.approx(1.0) and torch.isnan(got["r2"])


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
    assert float(module.test_metric.compute()) == pytest.approx(np.abs(pred - y).mean(), rel=1e-5)
    assert float(logged["test/rmse"]) == pytest.approx(np.sqrt(((pred - y) ** 2).mean()), rel=1e-5)
    assert float(logged["test/r2"]) == pytest.approx(r2_score(y, pred), rel=1e-4)
    assert "test/mae" in logged  # the main metric keeps its name


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
