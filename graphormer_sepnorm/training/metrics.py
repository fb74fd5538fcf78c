"""The metrics users compare, beside each stage's main one (``mae`` or ``roc_auc``).

Regression: ``rmse`` and ``r2`` (means over targets of the per-target values), and with several
targets ``mae_<name>``, ``rmse_<name>`` and ``r2_<name>`` per target; all in the targets' units
(the module passes de-standardized predictions). Binary: ``pr_auc`` (average precision, mean over
targets), with one target ``ece`` (expected calibration error of the probabilities, 15
bins), and with several targets ``roc_auc_<name>`` and ``pr_auc_<name>``. All are torchmetrics
objects, synchronized across DDP processes when computed.
"""

from __future__ import annotations

import re

import torch
from torch import Tensor, nn
from torchmetrics import Metric
from torchmetrics.classification import (
    BinaryAveragePrecision,
    BinaryCalibrationError,
    MultilabelAUROC,
    MultilabelAveragePrecision,
)
from torchmetrics.regression import MeanAbsoluteError, MeanSquaredError, R2Score


def metric_suffix(name: str) -> str:
    """A target name as a metric-name suffix: anything but letters, digits, ``.-`` as ``_``."""
    return re.sub(r"[^0-9A-Za-z.\-]+", "_", str(name)).strip("_") or "target"


class ExtraMetrics(nn.Module):
    """One stage's additional metrics; :meth:`compute` gives them as named scalars.

    Args:
        task: ``'regression'`` or ``'binary'``.
        target_names: The targets, in the model's output order.
    """

    def __init__(self, task: str, target_names: list[str]) -> None:
        super().__init__()
        self.task = task
        self.names = [metric_suffix(n) for n in target_names]
        t = len(target_names)
        metrics: dict[str, Metric]
        if task == "regression":
            metrics = {"mse": MeanSquaredError(num_outputs=t),
                       "r2": R2Score(multioutput="raw_values")}
            if t > 1:
                metrics["mae"] = MeanAbsoluteError(num_outputs=t)
        elif t == 1:
            # expected calibration error of the probabilities: 15 equal-width bins
            metrics = {"pr_auc": BinaryAveragePrecision(), "ece": BinaryCalibrationError()}
        else:
            metrics = {"pr_auc": MultilabelAveragePrecision(t, average="none"),
                       "roc_auc": MultilabelAUROC(t, average="none")}
        self.metrics = nn.ModuleDict(metrics)

    def update(self, preds: Tensor, target: Tensor) -> None:
        """``preds`` and ``target`` ``[B, T]``: values in the targets' units, or logits and 0/1."""
        if self.task == "binary":
            target = target.long()
            if preds.shape[1] == 1:
                preds, target = preds[:, 0], target[:, 0]
        elif preds.shape[1] == 1:
            preds, target = preds[:, 0], target[:, 0]  # R2Score and MSE take [B] for one output
        for key, metric in self.metrics.items():
            # the calibration error reads probabilities (given logits, it would guess from range)
            metric.update(preds.sigmoid() if key == "ece" else preds, target)

    def compute(self) -> dict[str, Tensor]:
        """Named scalars (``rmse``, ``r2``, ``rmse_<target>``, ...); then resets the metrics.

        Nothing before any update; ``r2`` is NaN with fewer than two molecules.
        """
        if not any(m.update_count for m in self.metrics.values()):
            return {}
        values = {k: self._value(k, m) for k, m in self.metrics.items()}
        for metric in self.metrics.values():
            metric.reset()
        if "mse" in values:
            values["rmse"] = values.pop("mse").sqrt()
        out: dict[str, Tensor] = {}
        for key in ("rmse", "r2", "pr_auc", "ece"):
            if key in values:
                out[key] = values[key].nanmean()
        if len(self.names) > 1:
            for key, per_target in values.items():
                out.update({f"{key}_{n}": v for n, v in zip(self.names, per_target, strict=True)})
        return out

    def _value(self, key: str, metric: Metric) -> Tensor:
        try:
            return torch.atleast_1d(metric.compute()).float()
        except ValueError:  # R2Score: "Needs at least two samples"
            if key != "r2":
                raise
            return torch.full((len(self.names),), float("nan"))


class WeightedMean(Metric):
    """The weighted mean of per-batch values (the losses), summed across DDP processes.

    Unlike ``torchmetrics.MeanMetric``, no NaN check reads each value back to the host.
    """

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("total", torch.zeros(()), dist_reduce_fx="sum")
        self.add_state("weight", torch.zeros(()), dist_reduce_fx="sum")

    def update(self, value: Tensor, weight: float = 1.0) -> None:
        """Adds ``value`` (a scalar tensor) with ``weight``."""
        self.total += value.detach().to(self.total.dtype) * weight
        self.weight += weight

    def compute(self) -> Tensor:
        """The weighted mean."""
        return self.total / self.weight
