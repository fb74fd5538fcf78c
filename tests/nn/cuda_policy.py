"""CUDA's autocast policy applied on the CPU, so tests see the casts a GPU's autocast makes.

CPU autocast leaves ``layer_norm``, ``softmax`` and ``sum`` in the input's precision; CUDA's
runs them in float32. Within :func:`cuda_autocast` CPU autocast follows CUDA's policy for the
ops this model uses.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch


@contextmanager
def cuda_autocast() -> Iterator[None]:
    """CPU autocast with CUDA's policy for the ops below (see the module docstring)."""
    library = torch.library.Library("aten", "IMPL")
    fp32 = ["layer_norm", "native_layer_norm", "group_norm", "exp", "log", "log1p", "expm1",
            "rsqrt", "reciprocal", "softplus", "pow.Tensor_Scalar", "pow.Tensor_Tensor",
            "binary_cross_entropy_with_logits", "l1_loss", "mse_loss"]
    to_float = ["softmax.int", "log_softmax.int", "sum", "sum.dim_IntList", "cumsum",
                "linalg_vector_norm"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
        for name in fp32:
            library.impl(name, _cast_kernel(name, "fp32"), "AutocastCPU")
        for name in to_float:
            library.impl(name, _cast_kernel(name, "dtype"), "AutocastCPU")
        library.impl("einsum", _cast_kernel("einsum", "lower"), "AutocastCPU")
    try:
        yield
    finally:
        library._destroy()


def _cast_kernel(name: str, policy: str) -> Callable[..., Any]:
    """An AutocastCPU kernel for ``name`` under CUDA's ``policy``.

    ``fp32``: float32 inputs; ``dtype``: a float32 result for half inputs (CUDA's
    ``fp32_set_opt_dtype``); ``lower``: bfloat16 inputs.
    """
    base, _, overload = name.partition(".")
    op = getattr(getattr(torch.ops.aten, base), overload or "default")
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
    low = (torch.float16, torch.bfloat16)

    def cast(value: Any, dtype: torch.dtype) -> Any:
        if isinstance(value, list | tuple):
            return type(value)(cast(v, dtype) for v in value)
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.to(dtype)
        return value

    def kernel(*args: Any, **kwargs: Any) -> Any:
        with torch._C._ExcludeDispatchKeyGuard(keys):
            if policy == "fp32":
                return op(*cast(args, torch.float32), **kwargs)
            if policy == "lower":
                return op(args[0], *cast(args[1:], torch.get_autocast_dtype("cpu")), **kwargs)
            positional = base in ("softmax", "log_softmax") and len(args) >= 3
            if args[0].dtype in low and kwargs.get("dtype") is None and not positional:
                kwargs["dtype"] = torch.float32
            return op(*args, **kwargs)

    return kernel
