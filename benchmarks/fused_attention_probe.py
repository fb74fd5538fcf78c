"""How much a fused CPU attention kernel would buy: a probe, not part of the package.

Compiles ``fused_attention_probe.cpp`` (a forward-only AVX2 kernel for head size 10, no
dropout) with ``torch.utils.cpp_extension`` and times it against what the package runs on the
CPU between the q/k/v projection and the output projection (``_SplitHeads``,
``biased_attention`` and the head-minor copy of the output), on attention groups of the shapes
the benchmarks' batches produce. Both sides get the same inputs; they alternate, and each
figure is the best of several rounds. Needs a C++ compiler, an AVX2 CPU and ``ninja``
(``pip install ninja``); the first run compiles for about a minute.

Example (from the repository root)::

    .venv/bin/python benchmarks/fused_attention_probe.py
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType

import torch
from torch import Tensor
from torch.utils.cpp_extension import load

from graphormer_sepnorm.nn.attention_core import biased_attention
from graphormer_sepnorm.nn.head_major import _SplitHeads

HEADS, HEAD_DIM = 8, 10
SHAPES = ((32, 29), (14, 47), (3, 67), (128, 24), (64, 13))
"""``(graphs, tokens)`` of attention groups seen in the MolHIV and ZINC benchmark batches."""


def current_path(qkv_t: Tensor, bias: Tensor, graphs: int, length: int) -> Tensor:
    """The package's CPU attention for one group, ``[D, B * L]`` out (head-minor rows)."""
    q_t, k_t, v_t = _SplitHeads.apply(qkv_t, HEADS, graphs, length)
    out_t = biased_attention(q_t, k_t, v_t, bias, HEAD_DIM**-0.5)
    return (out_t.view(HEADS, graphs, HEAD_DIM, length).permute(2, 0, 1, 3)
            .reshape(HEADS * HEAD_DIM, -1))


def seconds_per_call(step: Callable[[], object], calls: int) -> float:
    """Mean seconds of ``calls`` calls of ``step``."""
    start = time.perf_counter()
    for _ in range(calls):
        step()
    return (time.perf_counter() - start) / calls


def compare(kernel: ModuleType, graphs: int, length: int, rounds: int, calls: int) -> str:
    """One group shape: both sides on the same seeded inputs, alternating, best round each."""
    gen = torch.Generator().manual_seed(graphs * 1000 + length)
    qkv_t = torch.randn(3 * HEADS * HEAD_DIM, graphs * length, generator=gen)
    bias = torch.randn(HEADS * graphs, length, length, generator=gen)
    bias[..., -3:] = float("-inf")  # padded keys, as in a group's smaller graphs
    bias_t = bias.transpose(1, 2).contiguous()
    sides = {
        "current": partial(current_path, qkv_t, bias, graphs, length),
        "fused": partial(kernel.forward, qkv_t, bias_t, HEADS, graphs, length, length,
                         HEAD_DIM**-0.5),
    }
    error = (sides["current"]() - sides["fused"]()[0]).abs().max().item()
    times = dict.fromkeys(sides, float("inf"))
    for _ in range(rounds):
        for name, step in sides.items():
            times[name] = min(times[name], seconds_per_call(step, calls))
    flops = 2 * 2 * HEADS * graphs * length * length * HEAD_DIM
    rate = {name: flops / seconds / 1e9 for name, seconds in times.items()}
    return (f"{graphs:4d} graphs x {length:3d} tokens: current {times['current'] * 1e6:7.0f} us "
            f"({rate['current']:5.1f} GFLOP/s), fused {times['fused'] * 1e6:7.0f} us "
            f"({rate['fused']:5.1f} GFLOP/s), x{times['current'] / times['fused']:.2f}, "
            f"max |diff| {error:.1e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    kernel = load("graphormer_sepnorm_attention_probe", [str(Path(__file__).with_suffix(".cpp"))],
                  extra_cflags=["-O3", "-mavx2", "-mfma"])
    for graphs, length in SHAPES:
        print(compare(kernel, graphs, length, args.rounds, args.calls), flush=True)


if __name__ == "__main__":
    main()
