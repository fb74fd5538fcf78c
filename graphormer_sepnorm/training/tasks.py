"""What each kind of target means to training: its loss, main metric and predictions.

A task is a small ``nn.Module`` (so that the regression target scaler travels in the
``state_dict`` as ``task.target_mean`` and ``task.target_std``). The Lightning module asks it
for everything that depends on the target kind, and holds no ``if task == ...`` itself.

=============  ==================================  ==================  ========================
task           loss (on the head's outputs)        main metric         predictions
=============  ==================================  ==================  ========================
regression     L1 on standardized targets          ``mae``             de-standardized values
binary         BCE with logits                     ``roc_auc``         sigmoid probabilities
=============  ==================================  ==================  ========================

Binary probabilities are temperature-scaled (Guo et al., ICML 2017): each validation of a fit
sets ``task.logit_scale`` (one factor per target, saved in the checkpoint) to the one that
minimizes the validation molecules' cross-entropy of ``sigmoid(scale * logit)``. It changes no
ranking (ROC-AUC, PR-AUC), only how far the probabilities are from 0.5: a network trained to
convergence on BCE tends to be overconfident.

Examples:
    >>> import torch
    >>> task = make_task("regression", ["logS"])
    >>> task.set_scaler([2.0], [4.0])
    >>> task.to_predictions(torch.tensor([[0.5]]))
    tensor([[4.]])
    >>> task.metric_name, make_task("binary", ["active"]).metric_name
    ('mae', 'roc_auc')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import Metric
from torchmetrics.classification import BinaryAUROC, MultilabelAUROC
from torchmetrics.regression import MeanAbsoluteError

from graphormer_sepnorm.training.metrics import ExtraMetrics

TaskType = Literal["regression", "binary"]


class Task(nn.Module):
    """One kind of target: the base of :class:`RegressionTask` and :class:`BinaryTask`.

    All methods take the head's outputs ``out`` ``[B, T]`` (float) and targets ``y`` ``[B, T]``.

    Args:
        target_names: The targets, in the model's output order (``T`` of them).

    Attributes:
        name: ``'regression'`` or ``'binary'``, as in ``dataset_info['task']``.
        metric_name: The main metric, logged as ``val/<metric_name>`` and ``test/<...>``.
        mode: ``'min'`` or ``'max'``: whether a lower or higher main metric is better.
        scales_targets: Whether ``standardize_targets`` applies (:meth:`set_scaler`).
        calibrates: Whether :meth:`calibrate` fits anything (the module then keeps the
            validation outputs for it).
    """

    name: ClassVar[TaskType]
    metric_name: ClassVar[str]
    mode: ClassVar[Literal["min", "max"]]
    scales_targets: ClassVar[bool] = False
    calibrates: ClassVar[bool] = False

    def __init__(self, target_names: Sequence[str]) -> None:
        super().__init__()
        self.target_names = [str(n) for n in target_names]

    @property
    def num_targets(self) -> int:
        """``T``, the outputs of the head."""
        return len(self.target_names)

    def loss(self, out: Tensor, y: Tensor) -> Tensor:
        """The training loss, a scalar."""
        raise NotImplementedError

    def to_predictions(self, out: Tensor) -> Tensor:
        """``out`` as predictions: the targets' units, or probabilities."""
        raise NotImplementedError

    def metric_inputs(self, out: Tensor) -> Tensor:
        """What the metrics take for ``out`` (the targets' units, or logits)."""
        raise NotImplementedError

    def metric(self) -> Metric:
        """A new main metric (one per stage)."""
        raise NotImplementedError

    def update_metric(self, metric: Metric, preds: Tensor, y: Tensor) -> None:
        """Feeds ``preds`` (from :meth:`metric_inputs`) and ``y`` to a :meth:`metric`."""
        metric.update(preds, y)

    def extra_metrics(self) -> ExtraMetrics:
        """A new :class:`~graphormer_sepnorm.training.metrics.ExtraMetrics` (one per stage)."""
        return ExtraMetrics(self.name, self.target_names)

    def set_scaler(self, mean: Sequence[float] | Tensor, std: Sequence[float] | Tensor) -> None:
        """Sets the target scaler; only tasks with :attr:`scales_targets` have one."""
        raise ValueError(f"{self.name} targets are not standardized")

    def calibrate(self, out: Tensor, y: Tensor) -> dict[str, Tensor]:
        """Fits the predictions' calibration on held-out outputs; returns values to log.

        Nothing for tasks without one (regression: its uncertainty is the GP blend's).
        """
        return {}


class RegressionTask(Task):
    """L1 loss on standardized targets, ``mae`` in the targets' units.

    Buffers ``target_mean`` and ``target_std`` ``[T]`` (0 and 1 unless :meth:`set_scaler`
    was called): the head learns ``(y - target_mean) / target_std``.
    """

    name = "regression"
    metric_name = "mae"
    mode = "min"
    scales_targets = True
    target_mean: Tensor
    target_std: Tensor

    def __init__(self, target_names: Sequence[str]) -> None:
        super().__init__(target_names)
        self.register_buffer("target_mean", torch.zeros(self.num_targets))
        self.register_buffer("target_std", torch.ones(self.num_targets))

    def set_scaler(self, mean: Sequence[float] | Tensor, std: Sequence[float] | Tensor) -> None:
        """Sets ``target_mean`` and ``target_std`` (std clamped at 1e-8)."""
        self.target_mean.copy_(torch.as_tensor(mean, dtype=torch.float32))
        self.target_std.copy_(torch.as_tensor(std, dtype=torch.float32).clamp(min=1e-8))

    def loss(self, out: Tensor, y: Tensor) -> Tensor:
        """L1 between ``out`` and the standardized targets."""
        return F.l1_loss(out, (y - self.target_mean) / self.target_std)

    def to_predictions(self, out: Tensor) -> Tensor:
        """``out * target_std + target_mean``."""
        return out * self.target_std + self.target_mean

    def metric_inputs(self, out: Tensor) -> Tensor:
        """The predictions, in the targets' units."""
        return self.to_predictions(out)

    def metric(self) -> Metric:
        """Mean absolute error (over molecules and targets)."""
        return MeanAbsoluteError()


class BinaryTask(Task):
    """BCE with logits, ``roc_auc`` (averaged over targets when there are several).

    Buffer ``logit_scale`` ``[T]``: the inverse temperature of each target's probabilities (1
    until :meth:`calibrate`).
    """

    name = "binary"
    metric_name = "roc_auc"
    mode = "max"
    calibrates = True
    logit_scale: Tensor

    def __init__(self, target_names: Sequence[str]) -> None:
        super().__init__(target_names)
        self.register_buffer("logit_scale", torch.ones(self.num_targets))

    def loss(self, out: Tensor, y: Tensor) -> Tensor:
        """Binary cross-entropy of the logits ``out`` against 0/1 targets."""
        return F.binary_cross_entropy_with_logits(out, y)

    def to_predictions(self, out: Tensor) -> Tensor:
        """Calibrated probabilities, ``sigmoid(logit_scale * out)``."""
        return torch.sigmoid(self.metric_inputs(out))

    def metric_inputs(self, out: Tensor) -> Tensor:
        """The calibrated logits (ROC-AUC and PR-AUC depend only on their order)."""
        return out * self.logit_scale.to(out.dtype)

    def metric(self) -> Metric:
        """``BinaryAUROC`` for one target, ``MultilabelAUROC`` (macro) for several."""
        return BinaryAUROC() if self.num_targets == 1 else MultilabelAUROC(self.num_targets)

    def update_metric(self, metric: Metric, preds: Tensor, y: Tensor) -> None:
        """Integer targets; ``[B]`` for ``BinaryAUROC``, ``[B, T]`` for ``MultilabelAUROC``."""
        target = y.long()
        if preds.shape[1] == 1:
            preds, target = preds[:, 0], target[:, 0]
        metric.update(preds, target)

    def calibrate(self, out: Tensor, y: Tensor) -> dict[str, Tensor]:
        """Sets ``logit_scale`` from held-out raw logits ``out`` and labels ``y`` ``[N, T]``.

        A target whose labels are all one class (or missing) keeps its scale: nothing there
        tells how sharp its probabilities should be.

        Returns:
            ``{'logit_scale': mean over targets}``.
        """
        for t in range(self.num_targets):
            present = ~torch.isnan(y[:, t])
            labels = y[present, t].double()
            if 0 < labels.sum() < len(labels):
                self.logit_scale[t] = inverse_temperature(out[present, t].double(), labels)
        return {"logit_scale": self.logit_scale.mean()}


def inverse_temperature(logits: Tensor, labels: Tensor, steps: int = 50) -> float:
    """The ``s > 0`` minimizing the mean BCE of ``sigmoid(s * logits)`` against 0/1 ``labels``.

    Newton's method on this one-dimensional convex problem, from 1 and kept within [1e-3, 1e3]
    (labels that the logits separate perfectly want ``s`` to grow without end).
    """
    scale = 1.0
    for _ in range(steps):
        p = torch.sigmoid(scale * logits)
        gradient = float(((p - labels) * logits).mean())
        curvature = float((p * (1 - p) * logits.square()).mean())
        if curvature <= 1e-12:
            break
        step = gradient / curvature
        scale = min(max(scale - step, scale / 4, 1e-3), scale * 4, 1e3)
        if abs(step) < 1e-9 * scale:
            break
    return scale


TASKS: dict[str, type[Task]] = {"regression": RegressionTask, "binary": BinaryTask}


def make_task(name: str, target_names: Sequence[str]) -> Task:
    """The task ``name`` (``'regression'`` or ``'binary'``) for ``target_names``.

    Raises:
        ValueError: An unknown task name.
    """
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; use one of {sorted(TASKS)}")
    return TASKS[name](target_names)
