"""The fused C attention kernel against the plain torch CPU path, on the benchmarks' groups.

Times what runs between the q/k/v projection and the output projection, for attention groups
of the shapes the MolHIV and ZINC benchmark batches produce: the package's C kernel
(``graphormer_sepnorm.nn.cpu.native.fused_attention``) and the plain torch path it replaces
(``_SplitHeads``, ``biased_attention`` and the head-minor copy of the output; its
projections have head-minor rows, the kernel's ``nn.Linear``'s own order). Forward alone
(inference, no dropout) and forward plus backward (training, attention dropout 0.1, the output
gradient transposed as autograd hands it over). Both sides get the same inputs; they
alternate, and each figure is the best of several rounds.

Example (from the repository root)::

    .venv/bin/python benchmarks/attention_kernel.py
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from torch import Tensor

from graphormer_sepnorm.nn.cpu.head_major import _SplitHeads, biased_attention, head_minor_rows
from graphormer_sepnorm.nn.cpu.native.fused_attention import fused_attention

HEADS, HEAD_DIM = 8, 10
DIM = HEADS * HEAD_DIM
SHAPES = ((32, 29), (14, 47), (3, 67), (128, 24), (64, 13))
"""``(graphs, tokens)`` of attention groups seen in the MolHIV and ZINC benchmark batches."""


def torch_path(qkv_t: Tensor, bias: Tensor, graphs: int, p: float) -> Tensor:
    """The plain torch CPU path for one group, ``[D, B * L]`` out (head-minor rows)."""
    length = qkv_t.shape[1] // graphs
    q_t, k_t, v_t = _SplitHeads.apply(qkv_t, HEADS, graphs, length)
    out_t = biased_attention(q_t, k_t, v_t, bias, HEAD_DIM**-0.5, p)
    return out_t.view(HEADS, graphs, HEAD_DIM, length).permute(2, 0, 1, 3).reshape(DIM, -1)


def kernel_path(qkv_t: Tensor, bias_t: Tensor, graphs: int, p: float) -> Tensor:
    """The C kernel for one group (keys-first bias, rows in ``nn.Linear``'s order)."""
    return fused_attention(qkv_t, bias_t, HEADS, graphs, HEAD_DIM**-0.5, p)


def best_seconds(step: Callable[[], object], calls: int, rounds: int) -> list[float]:
    """Each round's mean seconds per call (the caller takes the best)."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            step()
        times.append((time.perf_counter() - start) / calls)
    return times


def compare(graphs: int, length: int, rounds: int, calls: int) -> str:
    """One group shape, both sides, forward and training; a table row."""
    gen = torch.Generator().manual_seed(graphs * 1000 + length)
    qkv_t = torch.randn(3 * DIM, graphs * length, generator=gen).requires_grad_()
    bias = torch.randn(HEADS * graphs, length, length, generator=gen)
    bias[..., -3:] = float("-inf")  # padded keys, as in a group's smaller graphs
    bias_t = bias.transpose(1, 2).contiguous().requires_grad_()
    bias.requires_grad_()
    grad = torch.randn(graphs * length, DIM, generator=gen).t()
    # the torch path's projections come with head-minor rows (reordered weights in the model)
    qkv_minor = head_minor_rows(qkv_t.detach(), HEADS, 3).requires_grad_()
    sides = {"torch": (torch_path, qkv_minor, bias), "kernel": (kernel_path, qkv_t, bias_t)}
    with torch.no_grad():
        a, b = (fn(qkv, tensor, graphs, 0.0) for fn, qkv, tensor in sides.values())
    error = (a - head_minor_rows(b, HEADS, 1)).abs().max().item()
    best: dict[tuple[str, str], float] = {}
    for _ in range(rounds):  # alternate the sides: the machine's speed drifts
        for name, (fn, qkv, tensor) in sides.items():
            def infer(fn=fn, qkv=qkv, tensor=tensor) -> None:
                with torch.no_grad():
                    fn(qkv, tensor, graphs, 0.0)

            def train(fn=fn, qkv=qkv, tensor=tensor) -> None:
                fn(qkv, tensor, graphs, 0.1).backward(grad)

            for mode, step in (("infer", infer), ("train", train)):
                seconds = min(best_seconds(step, calls, 1))
                best[name, mode] = min(best.get((name, mode), seconds), seconds)
    flops = 2 * 2 * HEADS * graphs * length * length * HEAD_DIM  # q k^T and probs v
    cells = []
    for mode, factor in (("infer", 1), ("train", 3)):
        slow, fast = best["torch", mode], best["kernel", mode]
        cells.append(f"{slow * 1e6:,.0f} us ({factor * flops / slow / 1e9:.1f}) | "
                     f"{fast * 1e6:,.0f} us ({factor * flops / fast / 1e9:.1f}) | "
                     f"{slow / fast:.1f}x")
    return f"| {graphs} x {length} | " + " | ".join(cells) + f" | {error:.1e} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print("group (graphs x tokens) | inference: torch (GFLOP/s) | kernel | speed-up | "
          "training: torch | kernel | speed-up | max |out diff|")
    print("| --- " * 8 + "|")
    for graphs, length in SHAPES:
        print(compare(graphs, length, args.rounds, args.calls), flush=True)


if __name__ == "__main__":
    main()
