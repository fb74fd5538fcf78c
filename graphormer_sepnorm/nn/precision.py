"""Activations in the autocast dtype: under bf16-mixed the layers exchange bfloat16 tensors.

Autocast casts a matrix product's inputs to bfloat16, but everything else keeps whatever
dtype it gets: the embeddings (float32 parameters) made the residual stream float32, and on
CUDA ``layer_norm`` is autocast to float32, so every norm read float32 and wrote float32 that
the next product cast back to bfloat16. Here the tokens enter the layers in the autocast dtype
(:func:`in_activation_dtype`) and :class:`LayerNorm` keeps its input's dtype (its statistics are
float32 inside the kernel either way). SepNorm's graph-token BatchNorm still computes its
statistics in float32 (:class:`~graphormer_sepnorm.nn.sepnorm.GraphTokenBatchNorm`), the edge
encoder sums hops in float32, and the loss is taken in float32.
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
