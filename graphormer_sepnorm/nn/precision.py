"""Activations in the autocast dtype: under bf16-mixed the layers exchange bfloat16 tensors.

Autocast leaves the residual stream float32 (float32 embeddings) and on CUDA runs
``layer_norm`` in float32; here the tokens enter the layers in the autocast dtype and
:class:`LayerNorm` keeps its input's (statistics are float32 inside the kernel either way).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def activation_dtype(x: Tensor) -> torch.dtype:
    """The autocast dtype where autocast is on for ``x``'s device, else ``x``'s dtype."""
    if x.is_floating_point() and torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


def in_activation_dtype(x: Tensor) -> Tensor:
    """``x`` in :func:`activation_dtype` (the layers' input: bfloat16 under bf16 autocast)."""
    return x.to(activation_dtype(x))


class LayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` that returns its input's dtype under autocast (same parameters).

    Examples:
        >>> norm = LayerNorm(8)
        >>> with torch.autocast("cpu", torch.bfloat16):
        ...     norm(torch.randn(2, 8, dtype=torch.bfloat16)).dtype
        torch.bfloat16
    """

    def forward(self, x: Tensor) -> Tensor:
        """Normalizes the last dimension of ``x``."""
        if x.dtype == torch.float32 or not torch.is_autocast_enabled(x.device.type):
            return super().forward(x)
        with torch.autocast(x.device.type, enabled=False):
            return F.layer_norm(x, self.normalized_shape, self.weight.to(x.dtype),
                                self.bias.to(x.dtype), self.eps)
