"""SepNorm (Chen et al., NeurIPS 2023): the graph token and the atoms get separate norms.

By default a BatchNorm across the graphs of a batch for position 0, a per-token LayerNorm for
the atoms. ShareNorm, one LayerNorm for every position, is the baseline.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from graphormer_sepnorm.nn.config import NormKind
from graphormer_sepnorm.nn.precision import LayerNorm


def is_distributed() -> bool:
    """True inside an initialized process group of more than one process."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def global_batch_moments(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Mean, biased variance and row count of ``x`` (``[B, D]``) over every process's rows.

    Summed in float64 through a differentiable all-reduce, so gradients reach every process's
    rows, as ``SyncBatchNorm``'s; ranks may hold different numbers of rows, including none.

    Returns:
        ``mean`` ``[D]`` and ``var`` ``[D]`` in ``x``'s dtype, and the total row count (float64
        scalar tensor).
    """
    from torch.distributed.nn.functional import all_reduce

    x64 = x.double()
    count = torch.full((1,), float(x.shape[0]), dtype=torch.float64, device=x.device)
    sums = all_reduce(torch.cat([x64.sum(0), (x64 * x64).sum(0), count]))
    dim = x.shape[1]
    total = sums[-1]
    mean = sums[:dim] / total.clamp(min=1)
    var = (sums[dim:2 * dim] / total.clamp(min=1) - mean * mean).clamp(min=0)
    return mean.to(x.dtype), var.to(x.dtype), total.detach()


class _FloatStatistics(nn.BatchNorm1d):
    """A BatchNorm whose statistics and affine parameters stay float32 in a half-precision model."""

    def _apply(self, fn: Any, recurse: bool = True) -> nn.Module:  # type: ignore[override]
        before = {name: t.dtype for name, t in [*self._parameters.items(),
                                                *self._buffers.items()] if t is not None}
        super()._apply(fn, recurse)
        for name, dtype in before.items():
            tensor = getattr(self, name)
            if dtype.is_floating_point and tensor.dtype in (torch.float16, torch.bfloat16) \
                    and dtype not in (torch.float16, torch.bfloat16):
                tensor.data = tensor.data.to(dtype)
        return self


class GraphTokenBatchNorm(_FloatStatistics):
    """``BatchNorm1d`` over the graph tokens of a batch, ``[B, D] -> [B, D]``.

    Unlike plain ``BatchNorm1d``: under DDP the statistics are the global batch's (as
    ``SyncBatchNorm``'s) unless ``sync=False``; a training batch of one graph (globally) is
    normalized with the running statistics and leaves them untouched, as in eval mode; the
    statistics are computed in float32 under mixed precision (float64 stays float64) and stay
    float32 in a ``bf16-true`` model. In eval mode a graph's output never depends on its batch.

    Args:
        num_features: ``D``.
        eps: Default: 1e-5.
        momentum: running-statistics momentum. Default: 0.1.
        sync: synchronize statistics across DDP processes. Default: true.

    ``tracks_in_training`` (default true): whether training batches update the running
    statistics (``training.batch_statistics`` turns it off while it re-estimates them).
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 sync: bool = True) -> None:
        super().__init__(num_features, eps=eps, momentum=momentum)
        self.sync = sync
        self.tracks_in_training = True

    def forward(self, x: Tensor) -> Tensor:
        """Normalizes ``x`` of shape ``[B, D]``."""
        # autocast casts none of these operations to a lower precision: float32 in, float32 out
        x32 = x.to(_statistics_dtype(x))
        if self.synchronized():
            out = self._global_batch_norm(x32)
        elif self.uses_batch_statistics(x.shape[0]) and self.momentum is None:  # BatchNorm1d
            out = self._cumulative_batch_norm(x32)  # would read its count to the host
        elif self.uses_batch_statistics(x.shape[0]) and self.tracks_in_training:
            out = super().forward(x32)
        elif self.uses_batch_statistics(x.shape[0]):
            out = F.batch_norm(x32, None, None, self.weight, self.bias, True, 0.0, self.eps)
        else:
            out = self._running_norm(x32)
        return out.to(x.dtype)

    def synchronized(self) -> bool:
        """Whether statistics now come from the global batch of all DDP processes."""
        return self.training and self.sync and is_distributed()

    def uses_batch_statistics(self, graphs: int) -> bool:
        """Whether ``graphs`` graph tokens (in one process) are normalized with their own."""
        return self.training and graphs > 1

    def _running_norm(self, x: Tensor) -> Tensor:
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            False, 0.0, self.eps)

    def _cumulative_batch_norm(self, x: Tensor) -> Tensor:
        var, mean = torch.var_mean(x, 0, correction=0)
        return self._normalize_and_track(x, mean, var, x.new_full((), len(x), dtype=torch.float64))

    def _global_batch_norm(self, x: Tensor) -> Tensor:
        return self._normalize_and_track(x, *global_batch_moments(x))

    def _normalize_and_track(self, x: Tensor, mean: Tensor, var: Tensor, count: Tensor) -> Tensor:
        # A (global) batch of one graph takes the running statistics, as in eval mode. Selected
        # on the device: reading count back would stop every process at each of these norms.
        usable = count > 1
        with torch.no_grad():
            tracked = usable & (self.momentum is None or self.tracks_in_training)
            self.num_batches_tracked.add_(tracked.to(self.num_batches_tracked.dtype))
            # momentum None: cumulative, as BatchNorm's; no lerp_ (vmap looped over replicas)
            factor = (self.momentum if self.momentum is not None
                      else 1.0 / self.num_batches_tracked.clamp(min=1).to(var.dtype))
            step = factor * tracked.to(var.dtype)
            unbiased = var * (count / (count - 1).clamp(min=1)).to(var.dtype)
            self.running_mean.add_((mean - self.running_mean) * step)
            self.running_var.add_((unbiased - self.running_var) * step)
        mean = torch.where(usable, mean, self.running_mean)
        var = torch.where(usable, var, self.running_var)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias


class MaskedBatchNorm(_FloatStatistics):
    """``BatchNorm1d`` over the real atoms of a padded ``[B, N, D]`` tensor; padding is ignored."""

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:  # type: ignore[override]
        """Normalizes the rows of ``x`` (``[B, N, D]``) where ``mask`` (``[B, N]``) is true."""
        if mask is None:
            mask = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        out = torch.zeros_like(x)
        out[mask] = super().forward(x[mask].to(_statistics_dtype(x))).to(x.dtype)
        return out


def _statistics_dtype(x: Tensor) -> torch.dtype:
    """float32 for half precisions (statistics need the range), float64 stays float64."""
    return torch.promote_types(x.dtype, torch.float32)


def _cls_norm(kind: NormKind, dim: int, eps: float, momentum: float,
              sync: bool = True) -> nn.Module:
    if kind == "batch":
        return GraphTokenBatchNorm(dim, eps=eps, momentum=momentum, sync=sync)
    if kind == "layer":
        return LayerNorm(dim, eps=eps)
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
        sync: under DDP, the graph token's BatchNorm uses the statistics of the global batch.
            Default: true. (``tok_norm='batch'`` is per process.)

    Shapes:
        ``x``: ``[B, 1 + N, D]``; ``node_mask``: ``[B, N]`` bool (true for real atoms).
        Output: ``[B, 1 + N, D]``.

    Examples:
        >>> import torch
        >>> norm = SepNorm(dim=8)  # BatchNorm for position 0, LayerNorm for the atoms
        >>> out = norm(torch.randn(4, 6, 8))
        >>> out.shape, round(float(out[:, 0].detach().mean(0).abs().max()), 4)
        (torch.Size([4, 6, 8]), 0.0)
    """

    def __init__(self, dim: int, cls_norm: NormKind = "batch", tok_norm: NormKind = "layer",
                 eps: float = 1e-5, momentum: float = 0.1, sync: bool = True) -> None:
        super().__init__()
        self.cls_norm = _cls_norm(cls_norm, dim, eps, momentum, sync)
        if tok_norm == "batch":
            self.tok_norm: nn.Module = MaskedBatchNorm(dim, eps=eps, momentum=momentum)
        else:
            self.tok_norm = _cls_norm(tok_norm, dim, eps, momentum)

    def forward(self, x: Tensor, node_mask: Tensor | None = None) -> Tensor:
        """Normalizes ``x``; see the class docstring for shapes."""
        graph_token = self.cls_norm(x[:, 0]).unsqueeze(1)
        if x.shape[1] == 1:
            return graph_token
        if isinstance(self.tok_norm, MaskedBatchNorm):
            atoms = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
            atoms[:, 0] = False
            if node_mask is not None:
                atoms[:, 1:] = node_mask[:, : x.shape[1] - 1]
            atoms_out = self.tok_norm(x, atoms)
        else:
            atoms_out = self.tok_norm(x)
        # fused with the norm; padded, not broadcast: its gradient is a slice, not a sum over L
        return torch.where(torch.arange(x.shape[1], device=x.device)[:, None] == 0,
                           F.pad(graph_token, (0, 0, 0, x.shape[1] - 1)), atoms_out)


class ShareNorm(LayerNorm):
    """The baseline: one LayerNorm shared by the graph token and the atoms, ``[B, L, D]``."""

    def forward(self, x: Tensor, node_mask: Tensor | None = None) -> Tensor:  # type: ignore[override]
        """Normalizes every position of ``x``; ``node_mask`` is accepted and unused."""
        return super().forward(x)


def build_norm(dim: int, sepnorm: bool, cls_norm: NormKind = "batch",
               tok_norm: NormKind = "layer", sync: bool = True) -> nn.Module:
    """A :class:`SepNorm` when ``sepnorm`` is true, else a :class:`ShareNorm`."""
    return SepNorm(dim, cls_norm, tok_norm, sync=sync) if sepnorm else ShareNorm(dim)
