"""Batch statistics summed over all processes of a distributed (DDP) run."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor


def is_distributed() -> bool:
    """True inside an initialized process group of more than one process."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def global_batch_moments(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Mean, biased variance and row count of ``x`` (``[B, D]``) over every process's rows.

    The sums travel through a differentiable all-reduce, so gradients flow to every process's
    rows, exactly as if one process held the whole batch (the role of ``SyncBatchNorm``). Ranks
    may hold different numbers of rows, including none. Sums are taken in float64: ``E[x^2] -
    E[x]^2`` loses precision in float32.

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
