"""One stage's metrics of a task, each target on its labelled molecules, and their means.

:class:`TaskMetrics` keeps the stage's outputs and labels (a ``CatMetric``: gathered across DDP
processes) and computes at the epoch's end, for each target on the molecules labelled for it:

=============  ==========================================================================
task           metrics
=============  ==========================================================================
regression     ``mae``, ``rmse``, ``r2`` (in the targets' units)
binary         ``roc_auc``, ``pr_auc`` (average precision), ``ece`` (15-bin calibration)
multiclass     ``roc_auc`` (one-vs-rest, macro over classes), ``accuracy``, ``f1`` (macro)
=============  ==========================================================================

Each is logged as the mean over targets (targets where it is undefined, e.g. a split with one
class of a label, are left out of it) and, with several targets, per target as
``<metric>_<target>``. With several regression targets the main ``mae`` is the mean of each
target's MAE divided by its training standard deviation (``scale``), so that no target's
units decide which checkpoint is best.
"""

from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.aggregation import CatMetric
from torchmetrics.functional.classification import (
    binary_auroc,
    binary_average_precision,
    binary_calibration_error,
    multiclass_f1_score,
)
from torchmetrics.functional.regression import r2_score

__all__ = ["TaskMetrics", "WeightedMean", "metric_suffix"]


def metric_suffix(name: str) -> str:
    """A target name as a metric-name suffix: anything but letters, digits, ``.-`` as ``_``."""
    return re.sub(r"[^0-9A-Za-z.\-]+", "_", str(name)).strip("_") or "target"


class TaskMetrics(CatMetric):
    """A stage's outputs and labels; :meth:`compute` gives the task's metrics by name.

    Args:
        task: ``'regression'``, ``'binary'`` or ``'multiclass'``.
        target_names: the label columns, in the model's output order (``T``).
        num_classes: ``K`` of a multiclass task.

    Shapes:
        :meth:`update` takes ``preds`` ``[B, T]`` (regression: the targets' units; binary:
        logits) or ``[B, T * K]`` (multiclass logits, target-major), and labels ``[B, T]``
        with NaN where missing.
    """

    def __init__(self, task: str, target_names: list[str], num_classes: int | None = None
                 ) -> None:
        super().__init__(nan_strategy="disable")
        self.task, self.num_classes = task, num_classes
        self.names = [metric_suffix(n) for n in target_names]
        self.scale: list[float] | None = None

    def update(self, preds: Tensor, target: Tensor) -> None:  # type: ignore[override]
        """Keeps the batch's ``preds`` and ``target`` (see the class's shapes)."""
        super().update(torch.cat([preds.detach().float(), target.to(preds.device).float()], 1))

    def compute(self) -> dict[str, Tensor]:  # type: ignore[override]
        """The metrics by name (means over targets, and per target when there are several).

        Empty before any update.
        """
        if not self.update_count:
            return {}
        both = super().compute()
        t = len(self.names)
        preds, labels = both[:, :-t], both[:, -t:]
        k = self.num_classes or 1
        per_target = [self._one(preds[:, i * k:(i + 1) * k], labels[:, i]) for i in range(t)]
        out = {key: _nanmean([m[key] for m in per_target]) for key in per_target[0]}
        if t > 1 and self.task == "regression" and self.scale is not None:
            out["mae"] = _nanmean([m["mae"] / s for m, s in zip(per_target, self.scale,
                                                                strict=True)])
        if t > 1:
            for name, metrics in zip(self.names, per_target, strict=True):
                out.update({f"{key}_{name}": value for key, value in metrics.items()})
        return {key: torch.tensor(value) for key, value in out.items()}

    def _one(self, preds: Tensor, y: Tensor) -> dict[str, float]:
        """One target's metrics on its labelled rows (``preds`` ``[N, 1]`` or ``[N, K]``)."""
        present = ~y.isnan()
        preds, y = preds[present], y[present]
        if self.task == "regression":
            return _regression(preds[:, 0], y)
        if self.task == "binary":
            return _binary(preds[:, 0], y.long())
        return _multiclass(preds, y.long(), self.num_classes or preds.shape[1])


def _nanmean(values: list[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else math.nan


def _regression(preds: Tensor, y: Tensor) -> dict[str, float]:
    if not len(y):
        return {"mae": math.nan, "rmse": math.nan, "r2": math.nan}
    error = preds - y
    r2 = float(r2_score(preds, y)) if len(y) > 1 else math.nan
    return {"mae": float(error.abs().mean()), "rmse": float(error.square().mean().sqrt()),
            "r2": r2}


def _binary(logits: Tensor, y: Tensor) -> dict[str, float]:
    if not len(y):
        return {"roc_auc": math.nan, "pr_auc": math.nan, "ece": math.nan}
    both = 0 < int(y.sum()) < len(y)
    return {"roc_auc": float(binary_auroc(logits, y)) if both else math.nan,
            "pr_auc": float(binary_average_precision(logits, y)) if both else math.nan,
            "ece": float(binary_calibration_error(logits.sigmoid(), y))}


def _multiclass(logits: Tensor, y: Tensor, classes: int) -> dict[str, float]:
    if not len(y):
        return {"roc_auc": math.nan, "accuracy": math.nan, "f1": math.nan}
    probabilities = F.softmax(logits, dim=1)
    aucs = [float(binary_auroc(probabilities[:, c], (y == c).long()))
            for c in range(classes) if 0 < int((y == c).sum()) < len(y)]
    return {"roc_auc": sum(aucs) / len(aucs) if aucs else math.nan,
            "accuracy": float((logits.argmax(1) == y).float().mean()),
            "f1": float(multiclass_f1_score(logits, y, classes, average="macro"))}


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
