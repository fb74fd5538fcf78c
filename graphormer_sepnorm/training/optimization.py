"""AdamW with Graphormer's schedule (linear warmup, polynomial decay), one or two learning rates."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from torch.optim.lr_scheduler import LambdaLR

from graphormer_sepnorm.nn.model import Graphormer

__all__ = ["adamw_with_schedule", "parameter_groups", "resolve_warmup",
           "warmup_polynomial_decay"]


def adamw_with_schedule(module: LightningModule, hp: Mapping[str, Any],
                        trainer: Trainer) -> dict[str, Any]:
    """Lightning's ``configure_optimizers`` answer for ``module`` with hyperparameters ``hp``.

    ``torch.optim.AdamW`` over :func:`parameter_groups`, fused on CPU and CUDA parameters.
    ``hp``: ``lr``, ``head_lr``, ``end_lr``, ``weight_decay``, ``warmup_steps``,
    ``total_steps`` (``None``: the trainer's estimate) and ``power``, as
    :class:`~graphormer_sepnorm.training.module.GraphormerModule` documents them.

    Raises:
        ValueError: ``end_lr`` above ``lr``, or no ``total_steps`` to be had.
    """
    # one pass for all parameters: 2.6 against 19 ms a step on a CPU core (cpu_training_speed)
    fused = all(p.device.type in ("cpu", "cuda") for p in module.parameters()) or None
    if trainer.precision == "16-mixed":
        fused = None  # its gradient scaler must unscale before clipping, outside the step
    optimizer = torch.optim.AdamW(parameter_groups(module, hp), lr=hp["lr"],
                                  weight_decay=hp["weight_decay"], fused=fused)
    total = hp["total_steps"]
    if total is None:
        total = trainer.estimated_stepping_batches
        if not math.isfinite(total):
            raise ValueError("total_steps is None and the trainer has no max_epochs or "
                             "max_steps to estimate it from")
    total = int(total)
    warmup = resolve_warmup(hp["warmup_steps"], total)
    peak, end, power = hp["lr"], hp["end_lr"], hp["power"]
    if end > peak:  # the factor below would grow every group's rate, head_lr's by 1e21
        raise ValueError(f"end_lr ({end:g}) must not exceed lr ({peak:g})")

    def factor(step: int) -> float:
        return warmup_polynomial_decay(step, warmup, total, peak, end, power) / peak

    scheduler = LambdaLR(optimizer, factor)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def parameter_groups(module: LightningModule, hp: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One group, or the encoder's and the head's when ``head_lr`` differs from ``lr``."""
    head_lr = hp.get("head_lr")
    if head_lr is None or head_lr == hp["lr"]:
        return [{"params": list(module.parameters())}]
    if not isinstance(module.model, Graphormer):
        raise ValueError("head_lr is for a single model, not packed replicas")
    head = {id(p) for p in module.model.head.parameters()}
    return [{"params": [p for p in module.parameters() if id(p) not in head]},
            {"params": list(module.model.head.parameters()), "lr": head_lr}]


def warmup_polynomial_decay(step: int, warmup_steps: int, total_steps: int, peak_lr: float,
                            end_lr: float, power: float = 1.0) -> float:
    """Learning rate at ``step`` (fairseq's ``polynomial_decay`` scheduler).

    Rises linearly from ``peak_lr / warmup_steps`` to ``peak_lr`` over the warmup, then decays as
    ``(peak_lr - end_lr) * (1 - progress) ** power + end_lr`` and stays at ``end_lr`` after
    ``total_steps``.

    Args:
        step: optimizer steps taken so far (0 for the first step).
        warmup_steps: steps of linear warmup (0 for none).
        total_steps: step at which ``end_lr`` is reached.
        peak_lr: learning rate at the end of the warmup.
        end_lr: final learning rate.
        power: exponent of the decay; 1 is linear. Default: 1.
    """
    if warmup_steps > 0 and step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return end_lr
    span = max(total_steps - warmup_steps, 1)
    progress = (step - warmup_steps) / span
    return (peak_lr - end_lr) * (1.0 - progress) ** power + end_lr


def resolve_warmup(warmup: int | float, total_steps: int) -> int:
    """Warmup steps: an int as is, a float in ``[0, 1)`` as a fraction of ``total_steps``."""
    if isinstance(warmup, float) and 0.0 <= warmup < 1.0:
        return int(round(warmup * total_steps))
    if warmup < 0:
        raise ValueError("warmup_steps must not be negative")
    return int(warmup)
