"""``torch.compile`` as this package calls it everywhere: a mode, plus inductor's workarounds.

torch 2.11's Triton code generation (the lent H200's image, 2026-11-27) stopped compiling
Graphormer's training step with ``AssertionError`` in ``tiling_utils.get_pw_red_splits``, reached
through the memory-coalescing analysis that picks a kernel's tiling (pytorch/pytorch#197077: a
fused reduction whose pointwise epilogue is not in the reduction's frame). Turning that analysis
off (``triton.coalesce_tiling_analysis``) compiled the same step on the same machine. The
workaround is given per compiled function, as an inductor option, so that nothing else in the
user's process changes; the option only steers Triton (GPU) kernels, so the CPU's C++ kernels
are untouched.

One more option, for speed: inductor's combo kernels (:data:`COMBO_KERNELS`). A packed
training step has hundreds of small independent kernels (the norms' statistics on 256 graph
tokens, each parameter's gradient written into the flat buffer, weight casts); on a GPU each
costs a launch of a few microseconds whatever its size, and combo kernels run up to 8 of them
as one (``benchmarks/gpu_roofline.py``: 623 -> 455 launches a ZINC-subset step at K=2). Triton
only: inductor leaves the CPU's kernels as they are.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch

__all__ = ["INDUCTOR_WORKAROUNDS", "WorkaroundCompile", "compile_kwargs", "compiled", "eager"]

#: Inductor options set in every compile of this package (when the installed torch has them).
INDUCTOR_WORKAROUNDS: dict[str, Any] = {"triton.coalesce_tiling_analysis": False}
#: Whether compiles use inductor's combo kernels (see the module docstring), from
#: ``GRAPHORMER_SEPNORM_COMBO_KERNELS`` when the package is imported (``0``: not). New on
#: 2026-11-28 and not yet run on a GPU: ``gpu/run.sh``'s fallback turns them off.
COMBO_KERNELS = os.environ.get("GRAPHORMER_SEPNORM_COMBO_KERNELS", "1") != "0"


def compile_kwargs(mode: str | None = None, **kwargs: Any) -> dict[str, Any]:
    """Keyword arguments for ``torch.compile`` or ``nn.Module.compile``: ``mode`` and options.

    The options: the workarounds and :data:`COMBO_KERNELS`. ``torch.compile`` takes a
    ``mode`` or ``options``, not both; the mode's own options (e.g. ``reduce-overhead``:
    ``{'triton.cudagraphs': True}``) are spelled out and these added to them.

    Args:
        mode: a ``torch.compile`` mode (``None``: ``'default'``).
        **kwargs: passed on (``dynamic``, ``fullgraph``, ...).

    Returns:
        ``{'options': ..., **kwargs}``.
    """
    from torch._inductor import config, list_mode_options

    options = dict(list_mode_options(mode or "default", kwargs.get("dynamic")))
    wanted = {**INDUCTOR_WORKAROUNDS, **({"combo_kernels": True} if COMBO_KERNELS else {})}
    options.update({key: value for key, value in wanted.items() if _has_option(config, key)})
    return {"options": options, **kwargs}


def compiled(fn: Callable[..., Any], mode: str | None = None, **kwargs: Any) -> Callable[..., Any]:
    """``torch.compile(fn, ...)`` with :func:`compile_kwargs`."""
    return torch.compile(fn, **compile_kwargs(mode, **kwargs))


@contextlib.contextmanager
def eager() -> Iterator[None]:
    """Runs compiled functions and modules eagerly inside (``set_stance('force_eager')``).

    For evaluation and the statistics pass of a compiled model: their batches take many padded
    lengths and sizes, each a compile of its own (on an H200, 2026-11-27, about 45 s for each
    of MolHIV's validation shapes), while eagerly a whole validation takes about a second
    (estimated from its kernel launches).
    """
    with torch.compiler.set_stance("force_eager"):
        yield


class WorkaroundCompile:
    """A module mixin: ``module.compile()`` with inductor gets its mode plus the workarounds.

    So a user's own ``model.compile()`` compiles as the package does. Given ``options`` or
    another backend, the arguments pass to ``nn.Module.compile`` as they are.
    """

    def compile(self, *args: Any, **kwargs: Any) -> None:
        """``nn.Module.compile(*args, **kwargs)``, the workarounds added for inductor."""
        if not args and "options" not in kwargs and kwargs.get("backend", "inductor") == \
                "inductor":
            kwargs = compile_kwargs(kwargs.pop("mode", None), **kwargs)
        super().compile(*args, **kwargs)  # type: ignore[misc]


def _has_option(config: Any, key: str) -> bool:
    """Whether inductor's ``config`` has the dotted option ``key`` (it differs between torches)."""
    node = config
    for part in key.split("."):
        if not hasattr(node, part):
            return False
        node = getattr(node, part)
    return True
