"""One optimizer step of packed replicas on the CPU: ``FlatAdamW`` against torch's AdamW.

Packed replicas keep all parameters in one ``[R, N]`` tensor (``PackedReplicas.flat``); a step
clips each replica's gradient by its own norm (gradient_clip_val 5.0, as the configs), then
takes AdamW's step, with no weight decay on the elements forward never reads (the ``trained``
mask: a single run's AdamW skips parameters without gradient). Timed, one step each, clipping
included:

- ``flat``: ``FlatAdamW`` (its default on the CPU: eager), the mask as its ``decay_mask``
  (``training/flat_adamw.py`` as of ``--flat-revision``, the last commit that had it);
- ``flat_compiled``: the same, its step compiled (the packed module's ``--model.compile``);
- ``fused``: what the packed module runs instead: ``torch.optim.AdamW(fused=True)`` on the
  same tensor after ``clip_grad_norm_per_replica``, the masked elements put back after the
  step by ``exempt_untrained``'s hooks (their gradient is zero: only decay moved them);
- ``fused_decay``: ``AdamW(fused=True, weight_decay=0)`` with the decay applied by hand
  (``flat *= 1 - lr * wd * mask``) before it;
- ``foreach``: ``torch.optim.AdamW(foreach=True)``, clipped and restored as ``fused``.

First every variant takes a few steps in float64 from one start with the same gradients
(half the replicas clipped, the learning rate changing each step) and must end with
``FlatAdamW``'s parameters and moments to 1e-12 (the compiled step in float32, to 1e-6:
inductor's CPU code for it fails in float64); then each is timed in float32, the variants
interleaved round by round, at 1 and 2 threads (``OMP_WAIT_POLICY=PASSIVE``). Prints the
median milliseconds per step and each one's ratio to ``flat``.

Example (from the repository root)::

    .venv/bin/python benchmarks/flat_adamw.py
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read once, when torch starts

import argparse  # noqa: E402
import importlib  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from tempfile import TemporaryDirectory  # noqa: E402
from types import SimpleNamespace  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
from ab_steps import export_revision  # noqa: E402
from torch import Tensor  # noqa: E402

from graphormer_sepnorm.nn.config import GraphormerConfig  # noqa: E402
from graphormer_sepnorm.nn.model import Graphormer  # noqa: E402
from graphormer_sepnorm.training.packed import (  # noqa: E402
    PackedReplicas,
    clip_grad_norm_per_replica,
    exempt_untrained,
)

#: The last commit with ``training/flat_adamw.py`` (replaced by torch's fused AdamW after this
#: benchmark); its package is exported with ``git archive`` to time ``FlatAdamW``.
FLAT_REVISION = "f0082a4"
FlatAdamW: Any = None

CLIP, LR, WD = 5.0, 5e-4, 0.01
ZINC = {"atom_feature_dims": (28,), "edge_feature_dims": (4,)}
MODELS = {"slim": GraphormerConfig(**ZINC),
          "cpu_10min": GraphormerConfig(**ZINC, num_layers=6, hidden_dim=64, ffn_dim=64,
                                        num_heads=8)}
SIZES = (("slim", 1), ("slim", 4), ("slim", 8), ("cpu_10min", 1), ("cpu_10min", 4))
VARIANTS = ("flat", "flat_compiled", "fused", "fused_decay", "foreach")


def flat_and_mask(model: str, replicas: int) -> tuple[Tensor, Tensor]:
    """The packed replicas' ``flat`` ``[R, N]`` and ``trained`` ``[N]`` for a model size."""
    models = []
    for seed in range(replicas):
        torch.manual_seed(seed)
        models.append(Graphormer(MODELS[model]))
    packed = PackedReplicas(models)
    return packed.flat.detach(), packed.trained


class Stepper:
    """One variant: its own copy of the parameter and optimizer; ``step()`` clips and steps."""

    def __init__(self, variant: str, start: Tensor, mask: Tensor) -> None:
        self.param = torch.nn.Parameter(start.clone())
        self.mask = mask.to(start.dtype)
        self.variant = variant
        if variant.startswith("flat"):
            compile_mode = "default" if variant == "flat_compiled" else None
            self.opt: torch.optim.Optimizer = FlatAdamW(
                [{"params": [self.param], "decay_mask": self.mask}], lr=LR, weight_decay=WD,
                compile=compile_mode)
            self.opt.clip(CLIP)
        else:
            kind = {"foreach": True} if variant == "foreach" else {"fused": True}
            decay = 0.0 if variant == "fused_decay" else WD
            self.opt = torch.optim.AdamW([self.param], lr=LR, weight_decay=decay, **kind)
            if variant != "fused_decay":  # the package's hooks, on this copy of flat
                exempt_untrained(self.opt, SimpleNamespace(flat=self.param, trained=mask))

    def set_lr(self, lr: float) -> None:
        """Sets the learning rate, as a schedule would."""
        self.opt.param_groups[0]["lr"] = lr

    def step(self) -> None:
        """Clips each replica's gradient and takes one AdamW step."""
        if self.variant.startswith("flat"):
            self.opt.step()
            return
        clip_grad_norm_per_replica([self.param], CLIP)
        if self.variant == "fused_decay":
            with torch.no_grad():
                self.param.mul_(1 - self.opt.param_groups[0]["lr"] * WD * self.mask)
        self.opt.step()

    def moments(self) -> list[Tensor]:
        """The parameter and its two moments."""
        state = self.opt.state[self.param]
        return [self.param.detach(), state["exp_avg"], state["exp_avg_sq"]]


def check(variants: list[str], dtype: torch.dtype, tolerance: float, steps: int = 4) -> None:
    """Every variant ends where ``flat`` ends, in ``dtype``, to ``tolerance``."""
    start, mask = flat_and_mask("cpu_10min", 4)
    start = start.to(dtype)
    gen = torch.Generator().manual_seed(0)
    steppers = {v: Stepper(v, start, mask) for v in variants}
    for step in range(steps):
        grad = torch.randn(start.shape, generator=gen, dtype=dtype) * mask
        grad[::2] *= 10 * CLIP / grad[::2].norm(dim=1, keepdim=True)  # even replicas clipped
        for stepper in steppers.values():
            stepper.set_lr(LR * (1 + step))
            stepper.param.grad = grad.clone()
            stepper.step()
    reference = steppers["flat"].moments()
    assert not torch.equal(reference[0], start)
    assert torch.equal(reference[0][:, mask == 0], start[:, mask == 0])  # never decayed
    for name, stepper in steppers.items():
        for got, want in zip(stepper.moments(), reference, strict=True):
            torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance, msg=name)
    print(f"{dtype}, {steps} steps, R=4 x N={start.shape[1]:,}: {', '.join(variants[1:])} end "
          f"with flat's parameters and moments ({tolerance:g}); masked elements never decayed")


def timed(step: Callable[[], None], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        step()
    return (time.perf_counter() - start) / calls


def time_size(model: str, replicas: int, variants: list[str], rounds: int,
              calls: int) -> dict[str, float]:
    """Median seconds per step of each variant, interleaved round by round (float32)."""
    torch._dynamo.reset()  # the compiled step: a fresh compile per size, not a recompile
    start, mask = flat_and_mask(model, replicas)
    gen = torch.Generator().manual_seed(1)
    grad = torch.randn(start.shape, generator=gen) * mask
    steppers = {v: Stepper(v, start, mask) for v in variants}
    for stepper in steppers.values():
        stepper.param.grad = grad.clone()
        for _ in range(3):  # warm-up (and compile)
            stepper.step()
    times: dict[str, list[float]] = {v: [] for v in variants}
    for index in range(rounds):
        order = variants[index % len(variants):] + variants[:index % len(variants)]
        for name in order:
            times[name].append(timed(steppers[name].step, calls))
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=10, help="steps per timed round")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--flat-revision", default=FLAT_REVISION,
                        help="git revision whose training/flat_adamw.py is timed")
    args = parser.parse_args(argv)
    with TemporaryDirectory() as folder:
        global FlatAdamW
        base = export_revision(args.flat_revision, Path(folder))
        FlatAdamW = importlib.import_module(f"{base.__name__}.training.flat_adamw").FlatAdamW
        run(args)


def run(args: argparse.Namespace) -> None:
    """The check, then the table."""
    variants = ["flat", *[v for v in args.variants if v != "flat"]]
    # inductor's CPU code for the compiled step fails in float64 (torch 2.13: KeyError 'buf2')
    check([v for v in variants if v != "flat_compiled"], torch.float64, 1e-12)
    if "flat_compiled" in variants:
        check(["flat", "flat_compiled"], torch.float32, 1e-6)
    others = variants[1:]
    print(f"\nms per step (median of {args.rounds} rounds of {args.calls} steps, float32, "
          f"clip {CLIP}); in brackets the ratio flat / variant (above 1: faster than flat)")
    print("| threads | model | R | N | " + " | ".join(variants) + " |")
    print("| --- " * (4 + len(variants)) + "|")
    for threads in args.threads:
        torch.set_num_threads(threads)
        for model, replicas in SIZES:
            seconds = time_size(model, replicas, variants, args.rounds, args.calls)
            n = sum(p.numel() for p in Graphormer(MODELS[model]).parameters())
            cells = [f"{seconds['flat'] * 1e3:.2f}"] + [
                f"{seconds[v] * 1e3:.2f} ({seconds['flat'] / seconds[v]:.2f}x)" for v in others]
            print(f"| {threads} | {model} | {replicas} | {n:,} | " + " | ".join(cells) + " |",
                  flush=True)


if __name__ == "__main__":
    main()
