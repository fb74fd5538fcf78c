"""SepNorm: the graph token ([CLS]) and the atom tokens get separate normalization layers.

From "On Separate Normalization in Self-supervised Transformers" (Chen et al., NeurIPS 2023):
position 0 is normalized by its own layer (BatchNorm across the graphs of a batch by default),
positions 1.. by a per-token LayerNorm. ShareNorm, the usual single LayerNorm for every position,
is the baseline.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

NormKind = Literal["batch", "layer", "none"]
NormSite = Literal["attn", "ffn", "final"]


class GraphTokenBatchNorm(nn.BatchNorm1d):
    """``BatchNorm1d`` over the graph tokens of a batch, ``[B, D] -> [B, D]``.

    Two departures from plain ``BatchNorm1d``, both about robustness:

    - A training batch of a single graph has no batch statistic (plain BatchNorm raises). It is
      normalized with the running statistics instead, and the running statistics are left
      untouched, exactly as in eval mode. Last, odd-sized batches of an epoch therefore train.
    - Statistics are computed in float32 even under mixed precision, then cast back.

    In eval mode the running statistics are used, so a graph's output never depends on the other
    graphs of its batch.
    """

    def forward(self, x: Tensor) -> Tensor:
        """Normalizes ``x`` of shape ``[B, D]``."""
        with torch.autocast(x.device.type, enabled=False):
            if self.training and x.shape[0] == 1 and self.track_running_stats:
                out = F.batch_norm(x.float(), self.running_mean, self.running_var,
                                   self.weight, self.bias, False, 0.0, self.eps)
            else:
                out = super().forward(x.float())
        return out.to(x.dtype)


class MaskedBatchNorm(nn.BatchNorm1d):
    """``BatchNorm1d`` over the real atoms of a padded ``[B, N, D]`` tensor; padding is ignored."""

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:  # type: ignore[override]
        """Normalizes the rows of ``x`` (``[B, N, D]``) where ``mask`` (``[B, N]``) is true."""
        if mask is None:
            mask = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        out = torch.zeros_like(x)
        with torch.autocast(x.device.type, enabled=False):
            out[mask] = super().forward(x[mask].float()).to(x.dtype)
        return out


def _cls_norm(kind: NormKind, dim: int, eps: float, momentum: float) -> nn.Module:
    if kind == "batch":
        return GraphTokenBatchNorm(dim, eps=eps, momentum=momentum)
    if kind == "layer":
        return nn.LayerNorm(dim, eps=eps)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"unknown cls_norm {kind!r}; expected 'batch', 'layer' or 'none'")


class SepNorm(nn.Module):
    """Separate normalization of the graph token (position 0) and the atom tokens (1..).

    Args:
        dim: hidden size ``D``.
        cls_norm: norm for the graph token: ``'batch'`` (BatchNorm across the graphs of the
            batch, default), ``'layer'`` or ``'none'``.
        tok_norm: norm for the atoms: ``'layer'`` (default), ``'batch'`` (over the real atoms of
            the batch, padding excluded) or ``'none'``.
        eps: epsilon of both norms. Default: 1e-5.
        momentum: running-statistics momentum of BatchNorm. Default: 0.1.

    Shapes:
        ``x``: ``[B, 1 + N, D]``; ``node_mask``: ``[B, N]`` bool (true for real atoms).
        Output: ``[B, 1 + N, D]``.
    """

    def __init__(self, dim: int, cls_norm: NormKind = "batch", tok_norm: NormKind = "layer",
                 eps: float = 1e-5, momentum: float = 0.1) -> None:
        super().__init__()
        self.cls_norm = _cls_norm(cls_norm, dim, eps, momentum)
        if tok_norm == "batch":
            self.tok_norm: nn.Module = MaskedBatchNorm(dim, eps=eps, momentum=momentum)
        else:
            self.tok_norm = _cls_norm(tok_norm, dim, eps, momentum)

    def forward(self, x: Tensor, node_mask: Tensor | None = None) -> Tensor:
        """Normalizes ``x``; see the class docstring for shapes."""
        if isinstance(self.tok_norm, MaskedBatchNorm) and x.shape[1] > 1:
            atoms = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
            atoms[:, 0] = False
            if node_mask is not None:
                atoms[:, 1:] = node_mask
            out = self.tok_norm(x, atoms)
        elif isinstance(self.tok_norm, (nn.Identity, MaskedBatchNorm)):
            out = x.clone()
        else:
            # Position 0 goes through the token norm too and is then overwritten: cheaper than
            # slicing and concatenating, and LayerNorm's backward does not need its output.
            out = self.tok_norm(x)
        out[:, 0] = self.cls_norm(x[:, 0])
        return out


class ShareNorm(nn.LayerNorm):
    """The baseline: one LayerNorm shared by the graph token and the atoms, ``[B, L, D]``."""

    def forward(self, x: Tensor, node_mask: Tensor | None = None) -> Tensor:  # type: ignore[override]
        """Normalizes every position of ``x``; ``node_mask`` is accepted and unused."""
        return super().forward(x)


def build_norm(dim: int, sepnorm: bool, cls_norm: NormKind = "batch",
               tok_norm: NormKind = "layer") -> nn.Module:
    """A :class:`SepNorm` when ``sepnorm`` is true, else a :class:`ShareNorm`."""
    return SepNorm(dim, cls_norm, tok_norm) if sepnorm else ShareNorm(dim)
