"""A ``torch.profiler`` report of a few steps: kernel and CUDA graph launches per step, top ops.

For ``gpu_step.py``: where a GPU's step goes when it runs far below the roofline estimate.
"""

from __future__ import annotations

import torch

#: The host calls that launch device work, or wait for it.
LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC",
            "cudaGraphLaunch", "cudaMemcpyAsync", "cudaStreamSynchronize",
            "cudaDeviceSynchronize")


def profile_report(profiler: torch.profiler.profile, title: str, steps: int) -> str:
    """Launches per step (kernels, CUDA graphs, copies, syncs) and the top operators."""
    events = profiler.key_averages()
    launches = {e.key: e.count / steps for e in events if e.key in LAUNCHES}
    sort = "self_device_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    table = events.table(sort_by=sort, row_limit=30, max_name_column_width=60)
    per_step = ", ".join(f"{k} {v:.1f}" for k, v in sorted(launches.items())) or "none"
    return f"## {title} ({steps} steps)\nper step: {per_step}\n{table}\n"


def profile_activities() -> list[torch.profiler.ProfilerActivity]:
    """The CPU's, and CUDA's where there is CUDA."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return activities


def sync() -> None:
    """Waits for the device's queued work, where there is CUDA (so that a clock reads it)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
