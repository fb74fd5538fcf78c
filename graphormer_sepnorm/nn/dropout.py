"""Dropout whose mask inductor draws inside the kernel that applies it."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """``F.dropout(x, p, training)``; traced by ``torch.compile``, a ``rand_like`` mask.

    Same distribution; inductor draws a ``rand_like`` mask inside the fused kernel, where under
    ``vmap`` ``F.dropout``'s ``bernoulli`` became an extern kernel writing a float32 mask.

    Examples:
        >>> x = torch.ones(1000)
        >>> kept = dropout(x, 0.25, training=True)
        >>> set(kept.unique().tolist()) <= {0.0, 4 / 3}
        True
    """
    if not training or p == 0.0:
        return x
    if torch.compiler.is_compiling():
        keep = torch.rand_like(x, dtype=torch.float32) >= p
        return x * keep.to(x.dtype) * (1.0 / (1.0 - p))
    return F.dropout(x, p, True)


class Dropout(nn.Dropout):
    """``nn.Dropout`` through :func:`dropout` (same ``p``, same state)."""

    def forward(self, x: Tensor) -> Tensor:
        """Drops elements of ``x`` in training."""
        return dropout(x, self.p, self.training)
