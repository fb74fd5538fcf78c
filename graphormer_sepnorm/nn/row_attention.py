"""Attention that reads ``q, k, v`` from token rows and writes its output to them, in one op.

With attention sequences (:mod:`~graphormer_sepnorm.data.sequences`) each layer gathered its
projected ``q, k, v`` rows ``[T, 3D]`` into ``[S, L, 3D]``, padded the heads to SDPA's
alignment (10 -> 16 dimensions for Graphormer-slim), attended, and gathered the output back to
rows; in the backward both gathers became scatter-adds. Counted by ``gpu_roofline.py`` those
moves and the padding were about a quarter of a packed ZINC-subset step's bytes. :func:`attend`
does the same attention with the gathers inside the kernel (Triton,
:mod:`~.row_attention_triton`, on CUDA): each position's row is read where it lies, the
projection's bias added as it loads, the output stored in the row that owns the position, heads
at their own size, and nothing else is written but the output, the gradients and the bias's
gradient. On other devices (and as the contract) :func:`reference` computes it with plain torch.

A row *owns* position ``p`` when ``row_sequence[row] == p`` and ``sequence_row[p] == row``.
Every real token's row owns its position; a padding position is owned by no row (its result is
dropped), and a padding row that owns none gets zeros.
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from typing import Any

import torch
from torch import Tensor

__all__ = ["ENABLED", "MAX_LENGTH", "applies", "attend", "keep_mask", "owned_rows", "prepare",
           "reference", "verified"]

#: Whether :func:`applies` lets token rows use the op on CUDA, from
#: ``GRAPHORMER_SEPNORM_ROW_ATTENTION`` when the package is imported (``0``: gathers and SDPA,
#: as before). Written 2026-11-28 and run only under Triton's interpreter on the CPU: a
#: lease's fallback should it fail on a GPU.
ENABLED = os.environ.get("GRAPHORMER_SEPNORM_ROW_ATTENTION", "1") != "0"
#: Whether Triton can be imported (the GPU image's torch brings it; the CPU wheel does not).
HAS_TRITON = importlib.util.find_spec("triton") is not None
#: Whether the kernels run on CPU tensors too, through Triton's interpreter: tests set it, with
#: ``TRITON_INTERPRET=1`` in the environment before :mod:`~.row_attention_triton` is imported.
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
#: The longest sequence a program holds whole (``L x L`` scores in registers): ZINC's 48
#: positions fit, MolHIV's 224 do not and keep the gathers.
MAX_LENGTH = 64


def applies(rows: Tensor, length: int) -> bool:
    """Whether token ``rows`` attend through :func:`attend` in sequences of ``length``.

    Where its kernels run (:func:`_kernels_on`: CUDA with Triton) and passed their check
    (:func:`verified`), and ``length`` is at most :data:`MAX_LENGTH`; never when
    :data:`ENABLED` is false.
    """
    return (ENABLED and length <= MAX_LENGTH and _kernels_on(rows.device)
            and verified(rows.device))


def verified(device: torch.device) -> bool:
    """Whether the kernels, run once on ``device``, agree with :func:`reference` (cached).

    They were written without a GPU: the first use on a device runs them on a small problem
    (bf16, the training dtype, with and without dropout) and compares; a failure to compile or
    a disagreement turns them off for the process, with a warning, and the gathers serve.
    While ``torch.compile`` traces or ``vmap`` runs, an unchecked device counts as failed for
    that call (nothing can run then): :meth:`GraphormerModule.configure_model` checks first
    (:func:`prepare`).
    """
    key = str(device)
    if key not in _VERIFIED:
        if torch.compiler.is_compiling() or _transformed():
            return False  # not checked here, and not cached: :func:`prepare` checks
        device = torch.device(device)
        # wherever it is first asked (under inference mode, autocast): the same check
        with (torch.inference_mode(False), torch.enable_grad(),
              torch.autocast(device.type, enabled=False)):
            _VERIFIED[key] = _check(device)
    return _VERIFIED[key]


_VERIFIED: dict[str, bool] = {}


def prepare(device: torch.device) -> None:
    """Checks the kernels on ``device`` if they would run there (before a step compiles)."""
    device = torch.device(device)
    if ENABLED and _kernels_on(device):
        verified(device)


def _transformed() -> bool:
    """Whether a functorch transform (``vmap``: packed replicas) is running: no check then."""
    return torch._C._functorch.peek_interpreter_stack() is not None


def _check(device: torch.device) -> bool:
    """The kernels against :func:`reference` on a small bf16 problem; a warning if not good."""
    generator = torch.Generator().manual_seed(0)
    graph = torch.arange(2 * 48).div(12, rounding_mode="floor").view(2, 48)  # 8 graphs of 12
    sequence_row = torch.arange(2 * 48, device=device)
    same = (graph[:, None, :, None] == graph[:, None, None, :]).to(device)
    # Graphormer-slim's heads (8 of 10) and ZINC's length: the kernels the step then reuses
    bias = torch.randn(2, 8, 48, 48, generator=generator).to(device).masked_fill(
        ~same, float("-inf"))
    qkv = torch.randn(2 * 48, 240, generator=generator).to(device)
    qkv_bias = torch.randn(240, generator=generator).to(device)
    scale = 10**-0.5
    try:
        low = tuple(t.bfloat16().requires_grad_() for t in (qkv, bias, qkv_bias))
        high = tuple(t.detach().double().requires_grad_() for t in low)
        out = attend(low[0], low[2], sequence_row, sequence_row, low[1], 0.0, scale)
        got = (out, *torch.autograd.grad(out.float().sin().sum(), low))
        dropped = attend(low[0], low[2], sequence_row, sequence_row, low[1], 0.1, scale)
        dropped = (dropped, *torch.autograd.grad(dropped.float().sin().sum(), low))
    except Exception as error:  # noqa: BLE001 (any failure means: do not use them)
        warnings.warn(f"row attention kernels failed on {device} ({error!r}): the gathers "
                      "and SDPA serve instead", stacklevel=2)
        return False
    out = reference(high[0], high[2], sequence_row, sequence_row, high[1], scale)
    want = (out, *torch.autograd.grad(out.sin().sum(), high))
    # within 3% of each tensor's largest value (bf16: sums of rounded rows cancel)
    pairs = zip(got, want, strict=True)
    good = all(bool((a.double() - b).abs().max() <= 0.03 * b.abs().max()) for a, b in pairs)
    good = good and all(bool(t.float().isfinite().all()) for t in dropped)
    if not good:
        warnings.warn(f"row attention kernels disagree with the reference on {device}: the "
                      "gathers and SDPA serve instead", stacklevel=2)
    return good


def _kernels_on(device: torch.device) -> bool:
    """Triton there and CUDA, or its interpreter on the CPU (:data:`INTERPRET`, for tests)."""
    return HAS_TRITON and (device.type == "cuda" or INTERPRET)


def attend(qkv: Tensor, qkv_bias: Tensor, sequence_row: Tensor, row_sequence: Tensor,
           bias: Tensor, dropout_p: float, scale: float) -> Tensor:
    """Each row's attention output ``[T, D]``, heads merged, before the output projection.

    Args:
        qkv: projected rows ``[T, 3D]`` (q, then k, then v; heads of ``D / H`` each), before
            the projection's bias.
        qkv_bias: the projection's bias ``[3D]``, added as the kernel loads the rows (a
            packed step's product and bias addition are separate kernels: this saves writing
            the sum and reading it again).
        sequence_row: ``[S * L]`` long, the row at each sequence position.
        row_sequence: ``[T]`` long, each row's position.
        bias: ``[S, H, L, L]``, ``-inf`` where a query must not see a key (each position
            must see some finite key).
        dropout_p: dropout on the probabilities (0 in evaluation).
        scale: the scores' factor, ``(D / H) ** -0.5``.
    """
    seed = torch.randint(0, 2**31 - 1, (1,), device=qkv.device) if dropout_p > 0 \
        else torch.zeros(1, dtype=torch.long, device=qkv.device)
    return _row_attention(qkv, qkv_bias.view(1, -1), sequence_row, row_sequence, bias, seed,
                          dropout_p, scale)


def owned_rows(sequence_row: Tensor, row_sequence: Tensor) -> Tensor:
    """``[T]`` bool: the rows that own a position (see the module docstring)."""
    rows = torch.arange(len(row_sequence), device=row_sequence.device)
    return sequence_row.index_select(0, row_sequence) == rows


def keep_mask(seed: Tensor, shape: torch.Size, dropout_p: float) -> Tensor | None:
    """The reference's dropout keep mask ``shape`` from ``seed`` (``None`` without dropout).

    Not the kernel's draws (Triton's ``tl.rand``): the same distribution, another stream.
    """
    if dropout_p == 0:
        return None
    generator = torch.Generator(device=seed.device).manual_seed(int(seed.item()))
    return torch.rand(shape, generator=generator, device=seed.device) >= dropout_p


def reference(qkv: Tensor, qkv_bias: Tensor, sequence_row: Tensor, row_sequence: Tensor,
              bias: Tensor, scale: float, keep: Tensor | None = None,
              dropout_p: float = 0.0) -> Tensor:
    """:func:`attend`'s function in plain torch: bias, gather, attend, gather back, orphans 0.

    ``qkv_bias`` ``[R, 3D]`` or ``[3D]``: ``R`` replicas' biases, each for its ``T / R``
    consecutive rows. ``keep`` ``[S, H, L, L]``: the probabilities kept by dropout (scaled by
    ``1 / (1 - dropout_p)``), or ``None``.
    """
    count, heads, length, _ = bias.shape
    dim = qkv.shape[1] // 3
    qkv_bias = qkv_bias.view(-1, 1, 3 * dim)
    qkv = (qkv.view(len(qkv_bias), -1, 3 * dim) + qkv_bias).view(-1, 3 * dim)
    q, k, v = qkv.index_select(0, sequence_row).view(
        count, length, 3, heads, dim // heads).permute(2, 0, 3, 1, 4)
    probs = ((q @ k.transpose(-1, -2)) * scale + bias.to(q.dtype)).softmax(-1)
    if keep is not None:
        probs = torch.where(keep, probs / (1 - dropout_p), 0.0)
    out = (probs @ v).transpose(1, 2).reshape(count * length, dim)
    own = owned_rows(sequence_row, row_sequence)
    return torch.where(own[:, None], out.index_select(0, row_sequence), 0.0)


@torch.library.custom_op("graphormer_sepnorm::row_attention", mutates_args=())
def _row_attention(qkv: Tensor, qkv_bias: Tensor, sequence_row: Tensor, row_sequence: Tensor,
                   bias: Tensor, seed: Tensor, dropout_p: float, scale: float) -> Tensor:
    if _kernels_on(qkv.device):
        from graphormer_sepnorm.nn import row_attention_triton as kernels

        out = qkv.new_empty(qkv.shape[0], qkv.shape[1] // 3)
        kernels.forward(qkv.contiguous(), qkv_bias.contiguous(), sequence_row.contiguous(),
                        row_sequence.contiguous(), bias.contiguous(), seed, dropout_p, scale,
                        out)
        return out
    keep = keep_mask(seed, bias.shape, dropout_p)
    return reference(qkv, qkv_bias, sequence_row, row_sequence, bias, scale, keep, dropout_p)


@_row_attention.register_fake
def _(qkv: Tensor, qkv_bias: Tensor, sequence_row: Tensor, row_sequence: Tensor, bias: Tensor,
      seed: Tensor, dropout_p: float, scale: float) -> Tensor:
    return qkv.new_empty(qkv.shape[0], qkv.shape[1] // 3)


@torch.library.custom_op("graphormer_sepnorm::row_attention_backward", mutates_args=())
def _row_attention_backward(grad: Tensor, qkv: Tensor, qkv_bias: Tensor, sequence_row: Tensor,
                            row_sequence: Tensor, bias: Tensor, seed: Tensor,
                            dropout_p: float, scale: float) -> tuple[Tensor, Tensor]:
    """The gradients of ``qkv`` (its bias's: summed over each replica's rows) and ``bias``."""
    if _kernels_on(qkv.device):
        from graphormer_sepnorm.nn import row_attention_triton as kernels

        grad_qkv, grad_bias = torch.empty_like(qkv), torch.empty_like(bias)
        kernels.backward(grad.contiguous(), qkv.contiguous(), qkv_bias.contiguous(),
                         sequence_row.contiguous(), row_sequence.contiguous(),
                         bias.contiguous(), seed, dropout_p, scale, grad_qkv, grad_bias)
        return grad_qkv, grad_bias
    keep = keep_mask(seed, bias.shape, dropout_p)
    _, vjp = torch.func.vjp(lambda a, b: reference(a, qkv_bias, sequence_row, row_sequence, b,
                                                   scale, keep, dropout_p), qkv, bias)
    return vjp(grad.to(qkv.dtype))


@_row_attention_backward.register_fake
def _(grad: Tensor, qkv: Tensor, qkv_bias: Tensor, sequence_row: Tensor, row_sequence: Tensor,
      bias: Tensor, seed: Tensor, dropout_p: float, scale: float) -> tuple[Tensor, Tensor]:
    return torch.empty_like(qkv), torch.empty_like(bias)


def _save(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    qkv, qkv_bias, sequence_row, row_sequence, bias, seed, ctx.dropout_p, ctx.scale = inputs
    ctx.save_for_backward(qkv, qkv_bias, sequence_row, row_sequence, bias, seed)


def _backward(ctx: Any, grad: Tensor) -> tuple[Any, ...]:
    qkv, qkv_bias, sequence_row, row_sequence, bias, seed = ctx.saved_tensors
    grad_qkv, grad_bias = _row_attention_backward(grad, qkv, qkv_bias, sequence_row,
                                                  row_sequence, bias, seed, ctx.dropout_p,
                                                  ctx.scale)
    # the bias was added to each of its replica's rows
    grad_qkv_bias = grad_qkv.view(len(qkv_bias), -1, grad_qkv.shape[1]).sum(1)
    return grad_qkv, grad_qkv_bias.to(qkv_bias.dtype), None, None, grad_bias, None, None, None


def _fold(info: Any, in_dims: tuple[Any, ...], qkv: Tensor, qkv_bias: Tensor,
          sequence_row: Tensor, row_sequence: Tensor, bias: Tensor, seed: Tensor,
          dropout_p: float, scale: float) -> tuple[Tensor, int]:
    """Under vmap (packed replicas): the replicas' rows and sequences as one larger batch.

    Replica ``r``'s row indices move by ``r * T`` and its positions by ``r * S * L``; one seed
    serves all (each replica's sequences are other programs, so other draws).
    """
    replicas = info.batch_size

    def lead(t: Tensor, dim: int | None) -> Tensor:
        return t.movedim(dim, 0) if dim is not None else t.expand(replicas, *t.shape)

    qkv, qkv_bias, sequence_row, row_sequence, bias = (lead(t, d) for t, d in zip(
        (qkv, qkv_bias, sequence_row, row_sequence, bias), in_dims[:5], strict=True))
    seed = seed if in_dims[5] is None else seed.movedim(in_dims[5], 0)[0]
    rows, positions = qkv.shape[1], sequence_row.shape[1]
    shift = torch.arange(replicas, device=qkv.device)[:, None]
    out = _row_attention(qkv.reshape(-1, qkv.shape[-1]), qkv_bias.reshape(replicas, -1),
                         (sequence_row + shift * rows).reshape(-1),
                         (row_sequence + shift * positions).reshape(-1),
                         bias.reshape(-1, *bias.shape[2:]), seed, dropout_p, scale)
    return out.view(replicas, rows, -1), 0


_row_attention.register_autograd(_backward, setup_context=_save)
_row_attention.register_vmap(_fold)
