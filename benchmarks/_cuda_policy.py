"""What a CUDA device runs differently, made to happen on the CPU (for ``gpu_roofline.py``).

- :func:`cuda_autocast`: CUDA's autocast policy for the ops this model uses, on CPU tensors
  (CPU autocast leaves ``layer_norm``, ``softmax`` and ``sum`` in the input's precision; CUDA's
  runs them in float32), so the graphs hold the casts a GPU's would.
- :func:`cuda_gather`: the grid batches' gathers compiled, as on CUDA
  (``graphormer_sepnorm.data.grid.gathers_compiled``).
- :func:`cuda_attention`: where the model chooses SDPA's fused CUDA kernel (heads padded,
  ``graphormer_sepnorm.nn.fused_attention.fused_head_dim``), it gets an opaque op with that kernel's
  inputs and outputs, one launch forward and one backward (``roofline::efficient_attention``):
  on the CPU, SDPA with a bias that needs a gradient runs PyTorch's unfused math instead. And
  attention sequences take the row attention op (``graphormer_sepnorm.nn.row_attention``) where
  CUDA would (``GRAPHORMER_SEPNORM_ROW_ATTENTION``, lengths up to its ``MAX_LENGTH``): an extern
  call reading its inputs and writing its outputs, as its Triton kernels do.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor
from torch.utils.flop_counter import register_flop_formula


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


@torch.library.custom_op("roofline::efficient_attention", mutates_args=())
def efficient_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, dropout_p: float,
                        scale: float) -> tuple[Tensor, Tensor]:
    """SDPA's memory-efficient CUDA kernel as one op.

    Returns the ``[B, H, Lq, Dh]`` output (stored as ``[B, Lq, H, Dh]``, as the kernel writes
    it) and the float32 log-sum-exp ``[B, H, Lq]``. On the CPU its math without dropout (the
    roofline never runs it on real data).
    """
    scores = (q @ k.transpose(-1, -2)) * scale + bias
    lse = scores.float().logsumexp(-1)
    out = (scores - lse[..., None].to(scores.dtype)).exp() @ v
    return out.transpose(1, 2).contiguous().transpose(1, 2), lse


@efficient_attention.register_fake
def _(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, dropout_p: float,
      scale: float) -> tuple[Tensor, Tensor]:
    b, h, lq, _ = q.shape
    out = q.new_empty(b, lq, h, v.shape[-1]).transpose(1, 2)
    return out, q.new_empty(b, h, lq, dtype=torch.float32)


@torch.library.custom_op("roofline::efficient_attention_backward", mutates_args=())
def efficient_attention_backward(grad: Tensor, q: Tensor, k: Tensor, v: Tensor, bias: Tensor,
                                 out: Tensor, lse: Tensor, dropout_p: float, scale: float
                                 ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The kernel's backward: the gradients of q, k, v and the bias (CPU: its math)."""
    probs = ((q @ k.transpose(-1, -2)) * scale + bias - lse[..., None].to(q.dtype)).exp()
    grad_probs = grad @ v.transpose(-1, -2)
    grad_scores = probs * (grad_probs - (grad * out).sum(-1, keepdim=True))
    return (grad_scores @ k * scale, grad_scores.transpose(-1, -2) @ q * scale,
            probs.transpose(-1, -2) @ grad, grad_scores)


@efficient_attention_backward.register_fake
def _(grad: Tensor, q: Tensor, k: Tensor, v: Tensor, bias: Tensor, out: Tensor, lse: Tensor,
      dropout_p: float, scale: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v),
            torch.empty_like(bias))


def _save(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    q, k, v, bias, ctx.dropout_p, ctx.scale = inputs
    ctx.save_for_backward(q, k, v, bias, *output)


def _backward(ctx: Any, grad: Tensor, _grad_lse: Tensor) -> tuple[Any, ...]:
    return (*efficient_attention_backward(grad, *ctx.saved_tensors, ctx.dropout_p, ctx.scale),
            None, None)


def _fold(info: Any, in_dims: tuple[Any, ...], q: Tensor, k: Tensor, v: Tensor, bias: Tensor,
          dropout_p: float, scale: float) -> tuple[tuple[Tensor, Tensor], tuple[int, int]]:
    """vmap: the replicas' batches as one larger batch, as CUDA's batching rule does."""
    def fold(t: Tensor, dim: int | None) -> Tensor:
        t = t.movedim(dim, 0) if dim is not None else t.expand(info.batch_size, *t.shape)
        return t.reshape(-1, *t.shape[2:])

    out, lse = efficient_attention(*(fold(t, d) for t, d in zip((q, k, v, bias), in_dims,
                                                                strict=False)),
                                   dropout_p, scale)
    return (out.unflatten(0, (info.batch_size, -1)),
            lse.unflatten(0, (info.batch_size, -1))), (0, 0)


efficient_attention.register_autograd(_backward, setup_context=_save)
efficient_attention.register_vmap(_fold)


def _attention_flops(q_shape: Any, k_shape: Any, *args: Any, **kwargs: Any) -> int:
    b, h, lq, d = q_shape
    return 4 * b * h * lq * k_shape[-2] * d


register_flop_formula(torch.ops.roofline.efficient_attention)(_attention_flops)
register_flop_formula(torch.ops.roofline.efficient_attention_backward)(
    lambda grad, q, k, *a, **kw: 2 * _attention_flops(q, k))


@contextmanager
def cuda_attention() -> Iterator[None]:
    """The model's CUDA attention path (padded heads, the fused kernel) on the CPU."""
    try:
        from graphormer_sepnorm.nn import fused_attention as attention
    except ImportError:  # code from before the padded heads
        yield
        return
    saved = attention.fused_head_dim, attention.sdpa
    attention.fused_head_dim = lambda head_dim, device: -(-head_dim // 8) * 8
    attention.sdpa = lambda q, k, v, bias, p, scale: efficient_attention(q, k, v, bias, p,
                                                                         scale)[0]
    try:
        from graphormer_sepnorm.nn import row_attention
    except ImportError:  # code from before the row attention
        row_attention = None
    if row_attention is not None:
        saved_rows = row_attention.applies
        row_attention.applies = lambda rows, length: row_attention_applies(length)
    try:
        yield
    finally:
        attention.fused_head_dim, attention.sdpa = saved
        if row_attention is not None:
            row_attention.applies = saved_rows


def row_attention_applies(length: int) -> bool:
    """Whether attention sequences of ``length`` take the row attention op on CUDA.

    As once its kernels passed their check there (on the CPU the op runs its reference);
    false for code from before the op.
    """
    try:
        from graphormer_sepnorm.nn import row_attention
    except ImportError:
        return False
    return row_attention.ENABLED and length <= row_attention.MAX_LENGTH


@contextmanager
def cuda_gather() -> Iterator[None]:
    """``GridGraphs.batch`` compiled, as on CUDA (code from before that: nothing changes)."""
    from graphormer_sepnorm.data import grid

    if not hasattr(grid, "gathers_compiled"):
        yield
        return
    saved = grid.gathers_compiled
    grid.gathers_compiled = lambda device: True
    try:
        yield
    finally:
        grid.gathers_compiled = saved
