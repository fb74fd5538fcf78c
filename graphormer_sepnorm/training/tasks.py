"""What each kind of label means to training: its loss, metrics, monitor and predictions.

A task is a small ``nn.Module`` (so that the regression target scaler and the classifiers'
temperatures travel in the ``state_dict`` as ``task.*`` buffers). The Lightning module asks it
for everything that depends on the label kind, and holds no ``if task == ...`` itself.

=============  ===============================  ================  ==============================
task           loss (on the head's outputs)     monitor           predictions
=============  ===============================  ================  ==============================
regression     L1 on standardized labels        ``mae``, lowest   values in the labels' units
binary         BCE with logits                  ``roc_auc``       a probability per label
multiclass     cross-entropy, ``K`` per label   ``roc_auc``       ``K`` probabilities per label
=============  ===============================  ================  ==============================

Labels may be missing (NaN): every loss is the mean over the labelled cells only, and the
metrics (:class:`~graphormer_sepnorm.training.metrics.TaskMetrics`) skip the others.

Classifiers' probabilities are temperature-scaled (Guo et al., ICML 2017): each validation of a
fit sets ``task.logit_scale`` (one factor per label, saved in the checkpoint) to the one that
minimizes the validation molecules' cross-entropy of ``softmax(scale * logits)``. It changes no
ranking, only how far the probabilities are from uniform.

Examples:
    >>> import torch
    >>> task = make_task("regression", ["logS"])
    >>> task.set_scaler([2.0], [4.0])
    >>> task.to_predictions(torch.tensor([[0.5]]))
    tensor([[4.]])
    >>> task.metric_name, make_task("binary", ["active"]).mode
    ('mae', 'max')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphormer_sepnorm.training.metrics import TaskMetrics

TaskType = Literal["regression", "binary", "multiclass"]


def masked_mean(values: Tensor, present: Tensor) -> Tensor:
    """The mean of ``values`` where ``present``; 0 when nothing is (no host synchronization)."""
    return torch.where(present, values, 0).sum() / present.sum().clamp(min=1)


class Task(nn.Module):
    """One kind of label: the base of the three tasks.

    All methods take the head's outputs ``out`` ``[B, C]`` (float; ``C = T``, or ``T * K``
    for multiclass) and labels ``y`` ``[B, T]`` (NaN where missing).

    Args:
        target_names: the label columns, in the model's output order (``T`` of them).

    Attributes:
        name: as in ``dataset_info['task']``.
        metric_name: the metric the best checkpoint is chosen on (``val/<metric_name>``).
        mode: ``'min'`` or ``'max'``: whether a lower or higher one is better.
        scales_targets: whether ``standardize_targets`` applies (:meth:`set_scaler`).
        calibrates: whether :meth:`calibrate` fits anything.
    """

    name: ClassVar[TaskType]
    metric_name: ClassVar[str]
    mode: ClassVar[Literal["min", "max"]]
    scales_targets: ClassVar[bool] = False
    calibrates: ClassVar[bool] = False
    num_classes: int | None = None

    def __init__(self, target_names: Sequence[str]) -> None:
        super().__init__()
        self.target_names = [str(n) for n in target_names]

    @property
    def num_targets(self) -> int:
        """``T``, the label columns."""
        return len(self.target_names)

    def loss(self, out: Tensor, y: Tensor) -> Tensor:
        """The training loss over the labelled cells, a scalar."""
        raise NotImplementedError

    def to_predictions(self, out: Tensor) -> Tensor:
        """``out`` as predictions: the labels' units, or probabilities."""
        raise NotImplementedError

    def metric_inputs(self, out: Tensor) -> Tensor:
        """What the metrics take for ``out`` (the labels' units, or calibrated logits)."""
        raise NotImplementedError

    def metrics(self) -> TaskMetrics:
        """A new stage's :class:`~graphormer_sepnorm.training.metrics.TaskMetrics`."""
        return TaskMetrics(self.name, self.target_names, self.num_classes)

    def set_scaler(self, mean: Sequence[float] | Tensor, std: Sequence[float] | Tensor) -> None:
        """Sets the target scaler; only tasks with :attr:`scales_targets` have one."""
        raise ValueError(f"{self.name} targets are not standardized")

    def calibrate(self, out: Tensor, y: Tensor) -> dict[str, Tensor]:
        """Fits the predictions' calibration on held-out outputs; returns values to log."""
        return {}


class RegressionTask(Task):
    """L1 loss on standardized labels, ``mae`` in the labels' units.

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
        """L1 between ``out`` and the standardized labels, over the labelled cells."""
        return masked_mean((out - (y - self.target_mean) / self.target_std).abs(), ~y.isnan())

    def to_predictions(self, out: Tensor) -> Tensor:
        """``out * target_std + target_mean``."""
        return out * self.target_std + self.target_mean

    def metric_inputs(self, out: Tensor) -> Tensor:
        """The predictions, in the labels' units."""
        return self.to_predictions(out)


class BinaryTask(Task):
    """BCE with logits; ``roc_auc`` (the mean over labels) is monitored.

    Buffer ``logit_scale`` ``[T]``: the inverse temperature of each label's probabilities.
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
        """Binary cross-entropy of the logits ``out`` against 0/1 labels, labelled cells."""
        present = ~y.isnan()
        losses = F.binary_cross_entropy_with_logits(out, y.nan_to_num(0.0), reduction="none")
        return masked_mean(losses, present)

    def to_predictions(self, out: Tensor) -> Tensor:
        """Calibrated probabilities, ``sigmoid(logit_scale * out)``."""
        return torch.sigmoid(self.metric_inputs(out))

    def metric_inputs(self, out: Tensor) -> Tensor:
        """The calibrated logits (ROC-AUC and PR-AUC depend only on their order)."""
        return out * self.logit_scale.to(out.dtype)

    def calibrate(self, out: Tensor, y: Tensor) -> dict[str, Tensor]:
        """Sets ``logit_scale`` from held-out raw logits ``out`` and labels ``y`` ``[N, T]``.

        A label whose values are all one class (or missing) keeps its scale.

        Returns:
            ``{'logit_scale': mean over labels}``.
        """
        return fit_scales(self.logit_scale, torch.stack([-out, out], -1) / 2, y)


class MulticlassTask(Task):
    """Cross-entropy over ``K`` classes per label; ``roc_auc`` (one-vs-rest) is monitored.

    The head's outputs are ``[B, T * K]``, label ``t``'s ``K`` logits at ``t * K .. t * K + K``.
    Buffer ``logit_scale`` ``[T]``: each label's inverse temperature.

    Args:
        target_names: the label columns.
        num_classes: ``K``, at least 2.
    """

    name = "multiclass"
    metric_name = "roc_auc"
    mode = "max"
    calibrates = True
    logit_scale: Tensor

    def __init__(self, target_names: Sequence[str], num_classes: int) -> None:
        super().__init__(target_names)
        if num_classes < 2:
            raise ValueError(f"a multiclass task needs at least 2 classes, got {num_classes}")
        self.num_classes = int(num_classes)
        self.register_buffer("logit_scale", torch.ones(self.num_targets))

    def _logits(self, out: Tensor) -> Tensor:
        return out.unflatten(-1, (self.num_targets, self.num_classes))

    def loss(self, out: Tensor, y: Tensor) -> Tensor:
        """Cross-entropy of each label's ``K`` logits against its class, labelled cells."""
        logits = self._logits(out)
        losses = F.cross_entropy(logits.flatten(0, -2), y.nan_to_num(0.0).long().flatten(),
                                 reduction="none")
        return masked_mean(losses.view_as(y), ~y.isnan())

    def to_predictions(self, out: Tensor) -> Tensor:
        """Calibrated class probabilities, ``[B, T * K]`` (each label's ``K`` sum to 1)."""
        return F.softmax(self._logits(self.metric_inputs(out)), dim=-1).flatten(-2)

    def metric_inputs(self, out: Tensor) -> Tensor:
        """The calibrated logits ``[B, T * K]``."""
        scale = self.logit_scale.to(out.dtype).repeat_interleave(self.num_classes)
        return out * scale

    def calibrate(self, out: Tensor, y: Tensor) -> dict[str, Tensor]:
        """Sets ``logit_scale`` from held-out raw logits ``[N, T * K]`` and labels ``[N, T]``.

        A label whose values are all one class (or missing) keeps its scale.
        """
        return fit_scales(self.logit_scale, self._logits(out), y)


def fit_scales(scale: Tensor, logits: Tensor, y: Tensor) -> dict[str, Tensor]:
    """Sets ``scale[t]`` to each label's :func:`inverse_temperature` on its labelled rows.

    Args:
        scale: ``[T]``, changed in place; a label whose values are all one class (or missing)
            keeps its value.
        logits: held-out raw class logits ``[N, T, K]`` (binary: ``[-x / 2, x / 2]``, whose
            softmax is ``sigmoid(x)``).
        y: class indices ``[N, T]``, NaN where missing.

    Returns:
        ``{'logit_scale': mean over labels}``.
    """
    for t in range(y.shape[1]):
        present = ~torch.isnan(y[:, t])
        labels = y[present, t].long()
        if len(labels.unique()) > 1:
            scale[t] = inverse_temperature(logits[present, t].double(), labels)
    return {"logit_scale": scale.mean()}


def inverse_temperature(logits: Tensor, labels: Tensor, steps: int = 50) -> float:
    """The ``s > 0`` minimizing the mean cross-entropy of ``softmax(s * logits)`` ``[N, K]``.

    Newton's method on this one-dimensional convex problem, from 1 and kept within [1e-3, 1e3]
    (labels that the logits separate perfectly want ``s`` to grow without end). With two
    columns ``(-x/2, x/2)`` it is the binary ``sigmoid(s * x)`` case.
    """
    scale = 1.0
    chosen = logits.gather(1, labels[:, None])[:, 0]
    for _ in range(steps):
        p = torch.softmax(scale * logits, dim=1)
        mean = (p * logits).sum(1)
        gradient = float((mean - chosen).mean())
        curvature = float(((p * logits.square()).sum(1) - mean.square()).mean())
        if curvature <= 1e-12:
            break
        step = gradient / curvature
        scale = min(max(scale - step, scale / 4, 1e-3), scale * 4, 1e3)
        if abs(step) < 1e-9 * scale:
            break
    return scale


TASKS: dict[str, type[Task]] = {"regression": RegressionTask, "binary": BinaryTask,
                                "multiclass": MulticlassTask}


def make_task(name: str, target_names: Sequence[str], num_classes: int | None = None) -> Task:
    """The task ``name`` for ``target_names`` (and ``num_classes``, for multiclass).

    Raises:
        ValueError: an unknown task name, or a multiclass task without ``num_classes``.
    """
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; use one of {sorted(TASKS)}")
    if name == "multiclass":
        if num_classes is None:
            raise ValueError("a multiclass task needs num_classes (dataset_info['num_classes'])")
        return MulticlassTask(target_names, num_classes)
    return TASKS[name](target_names)
