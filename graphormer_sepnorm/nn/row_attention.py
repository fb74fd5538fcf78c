"""Attention that projects token rows to ``q, k, v`` and writes its output to them, in one op.

With attention sequences (:mod:`~graphormer_sepnorm.data.sequences`) each layer gathered its
projected ``q, k, v`` rows ``[T, 3D]`` into ``[S, L, 3D]``, padded the heads to SDPA's
alignment (10 -> 16 dimensions for Graphormer-slim), attended, and gathered the output back to
rows; in the backward both gathers became scatter-adds. Counted by ``gpu_roofline.py`` those
moves and the padding were about a quarter of a packed ZINC-subset step's bytes. :func:`attend`
does the same attention with the gathers inside the kernel (Triton,
:mod:`~.row_attention_triton`, on CUDA): each position's normalized row is read where it lies
and projected to its head's ``q, k, v`` there (the ``[T, 3D]`` projection is never written in
the forward), the output stored in the row that owns the position, heads at their own size.
The backward writes the projection's gradient ``[T, 3D]`` (the input's and the weight's are
two matrix products of it, outside) and the bias's gradient, and sums the projection bias's
gradient per sequence as it goes. On other devices (and as the contract) :func:`reference`
computes it with plain torch.

A row *owns* position ``p`` when ``row_sequence[row] == p`` and ``sequence_row[p] == row``.
Every real token's row owns its position; a padding position is owned by no row (its result is
dropped), and a padding row that owns none gets zeros. A query sees the keys of its own graph
(``sequence_graph``), with the bias; padding positions (graph ``-1``) see each other with bias
0. The bias is read only at pairs of one graph, and its gradient is written only there: the
rest of the ``[S, L, L, H]`` gradient is unspecified (the kernels leave it unwritten, which
saves about half of the bias's bytes at ZINC-subset's sizes; the reference writes zeros), so
a caller must discard it, as :func:`~.token_rows.sequence_bias` does (:func:`graph_pairs`).
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from typing import Any

import torch
from torch import Tensor

__all__ = ["ENABLED", "MAX_LENGTH", "applies", "attend", "graph_pairs", "keep_mask",
           "owned_rows", "prepare", "reference", "verified"]

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
    # the bias's gradient is specified at pairs of one graph (here every position is real)
    same = (graph[:, :, None, None] == graph[:, None, :, None]).expand(2, 48, 48, 8).to(device)
    graph = graph.to(device)
    # Graphormer-slim's heads (8 of 10) and ZINC's length: the kernels the step then reuses;
    # the bias random between graphs too, where the kernels must not read it
    bias = torch.randn(2, 48, 48, 8, generator=generator).to(device)
    x = torch.randn(2 * 48, 80, generator=generator).to(device)
    weight = torch.randn(240, 80, generator=generator).div(80**0.5).to(device)
    qkv_bias = torch.randn(240, generator=generator).to(device)
    scale = 10**-0.5
    try:
        low = tuple(t.bfloat16().requires_grad_() for t in (x, weight, qkv_bias, bias))
        high = tuple(t.detach().double().requires_grad_() for t in low)
        out = attend(*low[:3], sequence_row, sequence_row, graph, low[3], 0.0, scale)
        got = (out, *torch.autograd.grad(out.float().sin().sum(), low))
        dropped = attend(*low[:3], sequence_row, sequence_row, graph, low[3], 0.1, scale)
        dropped = (dropped, *torch.autograd.grad(dropped.float().sin().sum(), low))
    except Exception as error:  # noqa: BLE001 (any failure means: do not use them)
        warnings.warn(f"row attention kernels failed on {device} ({error!r}): the gathers "
                      "and SDPA serve instead", stacklevel=2)
        return False
    out = reference(*high[:3], sequence_row, sequence_row, graph, high[3], scale)
    want = (out, *torch.autograd.grad(out.sin().sum(), high))
    got, dropped, want = ((*t[:-1], t[-1][same]) for t in (got, dropped, want))
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


def attend(x: Tensor, weight: Tensor, qkv_bias: Tensor, sequence_row: Tensor,
           row_sequence: Tensor, sequence_graph: Tensor, bias: Tensor, dropout_p: float,
           scale: float) -> Tensor:
    """Each row's attention output ``[T, D]``, heads merged, before the output projection.

    Args:
        x: normalized rows ``[T, D]``.
        weight: the ``q, k, v`` projection's weight ``[3D, D]`` (q, then k, then v; heads of
            ``D / H`` each), in ``x``'s dtype.
        qkv_bias: the projection's bias ``[3D]``.
        sequence_row: ``[S * L]`` long, the row at each sequence position.
        row_sequence: ``[T]`` long, each row's position.
        sequence_graph: ``[S, L]`` or ``[S * L]`` integers, each position's graph (``-1``:
            padding): a query sees its graph's keys.
        bias: ``[S, L, L, H]`` (heads last), read at pairs of one graph only (its gradient is
            unspecified at the others: see the module docstring).
        dropout_p: dropout on the probabilities (0 in evaluation).
        scale: the scores' factor, ``(D / H) ** -0.5``.
    """
    seed = torch.randint(0, 2**31 - 1, (1,), device=x.device) if dropout_p > 0 \
        else torch.zeros(1, dtype=torch.long, device=x.device)
    return _row_attention(x, weight.unsqueeze(0), qkv_bias.view(1, -1), sequence_row,
                          row_sequence, sequence_graph.reshape(-1), bias, seed, dropout_p, scale)


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


def reference(x: Tensor, weight: Tensor, qkv_bias: Tensor, sequence_row: Tensor,
              row_sequence: Tensor, sequence_graph: Tensor, bias: Tensor, scale: float,
              keep: Tensor | None = None, dropout_p: float = 0.0) -> Tensor:
    """:func:`attend`'s function in plain torch: project, gather, attend, gather back, orphans 0.

    ``weight`` ``[R, 3D, D]`` or ``[3D, D]`` and ``qkv_bias`` ``[R, 3D]`` or ``[3D]``: ``R``
    replicas' projections, each for its ``T / R`` consecutive rows. ``keep``
    ``[S, H, L, L]`` (heads before positions, unlike ``bias``): the probabilities kept by
    dropout (scaled by ``1 / (1 - dropout_p)``), or ``None``.
    """
    return _attend_projected(_project(x, weight), qkv_bias, sequence_row, row_sequence,
                             sequence_graph, bias, scale, keep, dropout_p)


def graph_pairs(sequence_graph: Tensor, bias: Tensor) -> Tensor:
    """``bias`` ``[S, L, L, H]`` at pairs of one graph of ``sequence_graph`` ``[S, L]``.

    ``-inf`` between graphs and 0 between padding positions (see the module docstring). Its
    gradient is a select (``where``), so an unspecified one elsewhere is dropped, NaN or not
    (as two ``masked_fill`` would, which cost 50 MB more a packed step by the estimate).
    """
    graph = sequence_graph.unsqueeze(-1)
    same = (graph == graph.transpose(1, 2)).unsqueeze(-1)
    return torch.where(same & (graph >= 0).unsqueeze(-1), bias,
                       torch.where(same, 0.0, float("-inf")).to(bias.dtype))


def _project(x: Tensor, weight: Tensor) -> Tensor:
    """Each replica's rows of ``x`` ``[T, D]`` times its ``weight`` ``[R, 3D, D]``: ``[T, 3D]``."""
    weight = weight.view(-1, *weight.shape[-2:])
    return (x.view(len(weight), -1, x.shape[-1]) @ weight.transpose(1, 2)).view(len(x), -1)


def _attend_projected(qkv: Tensor, qkv_bias: Tensor, sequence_row: Tensor, row_sequence: Tensor,
                      sequence_graph: Tensor, bias: Tensor, scale: float, keep: Tensor | None,
                      dropout_p: float) -> Tensor:
    """:func:`reference` from the projected rows ``qkv`` ``[T, 3D]`` (before the bias)."""
    count, length, _, heads = bias.shape
    bias = graph_pairs(sequence_graph.view(count, length), bias).permute(0, 3, 1, 2)
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
def _row_attention(x: Tensor, weight: Tensor, qkv_bias: Tensor, sequence_row: Tensor,
                   row_sequence: Tensor, sequence_graph: Tensor, bias: Tensor, seed: Tensor,
                   dropout_p: float, scale: float) -> Tensor:
    if _kernels_on(x.device):
        from graphormer_sepnorm.nn import row_attention_triton as kernels

        out = torch.empty_like(x)
        kernels.forward(x.contiguous(), weight.contiguous(), qkv_bias.contiguous(),
                        sequence_row.contiguous(), row_sequence.contiguous(),
                        sequence_graph.contiguous(), bias.contiguous(), seed, dropout_p, scale,
                        out)
        return out
    keep = keep_mask(seed, _probability_shape(bias), dropout_p)
    return reference(x, weight, qkv_bias, sequence_row, row_sequence, sequence_graph, bias,
                     scale, keep, dropout_p)


@_row_attention.register_fake
def _(x: Tensor, weight: Tensor, qkv_bias: Tensor, sequence_row: Tensor, row_sequence: Tensor,
      sequence_graph: Tensor, bias: Tensor, seed: Tensor, dropout_p: float,
      scale: float) -> Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("graphormer_sepnorm::row_attention_backward", mutates_args=())
def _row_attention_backward(grad: Tensor, x: Tensor, weight: Tensor, qkv_bias: Tensor,
                            sequence_row: Tensor, row_sequence: Tensor, sequence_graph: Tensor,
                            bias: Tensor, seed: Tensor, dropout_p: float,
                            scale: float) -> tuple[Tensor, Tensor, Tensor]:
    """The gradients of the projection ``[T, 3D]`` and ``bias``, and the former's sums.

    The bias's at pairs of one graph only (the kernels leave the others unwritten). The sums
    ``[S, 3D]`` (in at least float32): each sequence's, of the projection's gradient over the
    rows that own its positions; the projection bias's gradient is their sum over each
    replica's sequences.
    """
    if _kernels_on(x.device):
        from graphormer_sepnorm.nn import row_attention_triton as kernels

        grad_qkv, grad_bias, sums = _empty_gradients(x, weight, bias)
        kernels.backward(grad.contiguous(), x.contiguous(), weight.contiguous(),
                         qkv_bias.contiguous(), sequence_row.contiguous(),
                         row_sequence.contiguous(), sequence_graph.contiguous(),
                         bias.contiguous(), seed, dropout_p, scale, grad_qkv, grad_bias, sums)
        return grad_qkv, grad_bias, sums
    keep = keep_mask(seed, _probability_shape(bias), dropout_p)
    _, vjp = torch.func.vjp(lambda a, b: _attend_projected(
        a, qkv_bias, sequence_row, row_sequence, sequence_graph, b, scale, keep, dropout_p),
        _project(x, weight), bias)
    grad_qkv, grad_bias = vjp(grad.to(x.dtype))
    sequence = row_sequence // bias.shape[1]  # an orphan row's gradient is zero
    sums = _empty_sums(x, weight, bias).zero_()
    sums.index_add_(0, sequence, grad_qkv.to(sums.dtype))
    return grad_qkv, grad_bias, sums


def _probability_shape(bias: Tensor) -> torch.Size:
    """``[S, H, L, L]`` of a bias ``[S, L, L, H]``."""
    count, length, _, heads = bias.shape
    return torch.Size([count, heads, length, length])


def _empty_sums(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """Uninitialized per-sequence sums ``[S, 3D]``, in at least float32."""
    return x.new_empty(len(bias), weight.shape[-2],
                       dtype=torch.promote_types(x.dtype, torch.float32))


def _empty_gradients(x: Tensor, weight: Tensor, bias: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Uninitialized gradients: the projection's, the bias's, the per-sequence sums."""
    return (x.new_empty(len(x), weight.shape[-2]), torch.empty_like(bias),
            _empty_sums(x, weight, bias))


@_row_attention_backward.register_fake
def _(grad: Tensor, x: Tensor, weight: Tensor, qkv_bias: Tensor, sequence_row: Tensor,
      row_sequence: Tensor, sequence_graph: Tensor, bias: Tensor, seed: Tensor,
      dropout_p: float, scale: float) -> tuple[Tensor, Tensor, Tensor]:
    return _empty_gradients(x, weight, bias)


def _save(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    *tensors, ctx.dropout_p, ctx.scale = inputs
    ctx.save_for_backward(*tensors)


def _backward(ctx: Any, grad: Tensor) -> tuple[Any, ...]:
    x, weight, qkv_bias, sequence_row, row_sequence, sequence_graph, bias, seed = \
        ctx.saved_tensors
    grad_qkv, grad_bias, sums = _row_attention_backward(
        grad, x, weight, qkv_bias, sequence_row, row_sequence, sequence_graph, bias, seed,
        ctx.dropout_p, ctx.scale)
    # each replica's rows were projected by its weight, its bias added to them
    replicas = len(weight)
    per_replica = grad_qkv.view(replicas, -1, grad_qkv.shape[1])
    grad_x = torch.bmm(per_replica, weight).view_as(x)
    grad_weight = torch.bmm(per_replica.transpose(1, 2), x.view(replicas, -1, x.shape[1]))
    grad_qkv_bias = sums.view(replicas, -1, sums.shape[1]).sum(1)
    return (grad_x, grad_weight, grad_qkv_bias.to(qkv_bias.dtype), None, None, None, grad_bias,
            None, None, None)


def _fold(info: Any, in_dims: tuple[Any, ...], x: Tensor, weight: Tensor, qkv_bias: Tensor,
          sequence_row: Tensor, row_sequence: Tensor, sequence_graph: Tensor, bias: Tensor,
          seed: Tensor, dropout_p: float, scale: float) -> tuple[Tensor, int]:
    """Under vmap (packed replicas): the replicas' rows and sequences as one larger batch.

    Replica ``r``'s row indices move by ``r * T`` and its positions by ``r * S * L``; one seed
    serves all (each replica's sequences are other programs, so other draws).
    """
    replicas = info.batch_size

    def lead(t: Tensor, dim: int | None) -> Tensor:
        return t.movedim(dim, 0) if dim is not None else t.expand(replicas, *t.shape)

    x, weight, qkv_bias, sequence_row, row_sequence, sequence_graph, bias = (
        lead(t, d) for t, d in zip((x, weight, qkv_bias, sequence_row, row_sequence,
                                    sequence_graph, bias), in_dims[:7], strict=True))
    seed = seed if in_dims[7] is None else seed.movedim(in_dims[7], 0)[0]
    rows, positions = x.shape[1], sequence_row.shape[1]
    shift = torch.arange(replicas, device=x.device)[:, None]
    out = _row_attention(x.reshape(-1, x.shape[-1]), weight.reshape(-1, *weight.shape[-2:]),
                         qkv_bias.reshape(replicas, -1),
                         (sequence_row + shift * rows).reshape(-1),
                         (row_sequence + shift * positions).reshape(-1),
                         sequence_graph.reshape(-1), bias.reshape(-1, *bias.shape[2:]), seed,
                         dropout_p, scale)
    return out.view(replicas, rows, -1), 0


_row_attention.register_autograd(_backward, setup_context=_save)
_row_attention.register_vmap(_fold)
