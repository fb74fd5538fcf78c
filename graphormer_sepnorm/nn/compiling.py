"""``torch.compile`` as this package calls it: a mode, plus an inductor workaround for Triton.

Triton's code generation in torch 2.11 fails on Graphormer's training step in
``tiling_utils.get_pw_red_splits`` (pytorch/pytorch#197077) unless
``triton.coalesce_tiling_analysis`` is off; the option is given per compiled function only. A
model compiled by hand: ``model.compile(**compile_kwargs(mode))``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["INDUCTOR_WORKAROUNDS", "compile_kwargs", "compiled"]

#: Inductor options set in every compile of this package (when the installed torch has them).
INDUCTOR_WORKAROUNDS: dict[str, Any] = {"triton.coalesce_tiling_analysis": False}


def compile_kwargs(mode: str | None = None, **kwargs: Any) -> dict[str, Any]:
    """Keyword arguments for ``torch.compile`` or ``nn.Module.compile``: ``mode`` and workarounds.

    The mode's own options are spelled out, with the workarounds added (``torch.compile``
    takes a ``mode`` or ``options``, not both).

    Args:
        mode: a ``torch.compile`` mode (``None``: ``'default'``).
        **kwargs: passed on (``dynamic``, ``fullgraph``, ...).

    Returns:
        ``{'options': ..., **kwargs}``.
    """
    from torch._inductor import config, list_mode_options

    options = dict(list_mode_options(mode or "default", kwargs.get("dynamic")))
    options.update({key: value for key, value in INDUCTOR_WORKAROUNDS.items()
                    if _has_option(config, key)})
    return {"options": options, **kwargs}


def compiled(fn: Callable[..., Any], mode: str | None = None, **kwargs: Any) -> Callable[..., Any]:
    """``torch.compile(fn, ...)`` with :func:`compile_kwargs`."""
    return torch.compile(fn, **compile_kwargs(mode, **kwargs))


def _has_option(config: Any, key: str) -> bool:
    """Whether inductor's ``config`` has the dotted option ``key`` (it differs between torches)."""
    node = config
    for part in key.split("."):
        if not hasattr(node, part):
            return False
        node = getattr(node, part)
    return True
