"""Graphormer's learning-rate schedule: linear warmup, then polynomial decay."""

from __future__ import annotations


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
