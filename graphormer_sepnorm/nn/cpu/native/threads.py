"""Runs a C kernel over slices of its work on ``torch.get_num_threads()`` threads.

ctypes drops the GIL while a foreign function runs, so plain Python threads run the slices
in parallel; the kernels themselves stay single-threaded and index their work absolutely, so
their results (dropout masks included) do not depend on the split.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache

import torch

PARALLEL_ABOVE = 1 << 15
"""Work (elements or scores) above which it is split over threads; below, one call."""


@cache
def _pool(workers: int, pid: int) -> ThreadPoolExecutor:
    """A pool per process: a forked child (a data loader worker) must not reuse its parent's."""
    return ThreadPoolExecutor(workers, thread_name_prefix="graphormer_sepnorm_native")


def run_split(call: Callable[[int, int], object], total: int, work: int,
              align: int = 1) -> list[object]:
    """``call(begin, end)`` over ``[0, total)``, split when ``work`` is above the threshold.

    Args:
        call: runs one slice and returns the kernel's status.
        total: units to split (pairs, elements).
        work: how much work all units are, to decide whether threads pay off.
        align: slice bounds are multiples of this (e.g. whole vectors).

    Returns:
        Each slice's return value.
    """
    workers = min(torch.get_num_threads(), max(total // align, 1))
    if workers < 2 or work <= PARALLEL_ABOVE:
        return [call(0, total)]
    cuts = [min(total, (total * w // workers + align - 1) // align * align)
            for w in range(workers)] + [total]
    bounds = list(zip(cuts[:-1], cuts[1:], strict=True))
    return list(_pool(workers, os.getpid()).map(lambda bound: call(*bound), bounds))
