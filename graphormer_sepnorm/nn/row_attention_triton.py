"""Triton kernels of :mod:`~graphormer_sepnorm.nn.row_attention`: attention that reads token rows.

One program per (sequence, head) holds the whole ``L x L`` block of its scores (``L`` at most
:data:`~graphormer_sepnorm.nn.row_attention.MAX_LENGTH`): it loads each position's normalized
token row (``sequence_row``) and projects it to the head's ``q, k, v`` (its replica's weight
rows and bias: a few ``[L, 16] x [16, E]`` products), loads its bias block, and stores the
output in the row that owns the position (``row_sequence[row] == position``); padding positions'
results are dropped. The bias is read, and its gradient written, only at pairs of one graph
(``sequence_graph``): heads last, a query's keys of its own graph are one run of a few 32-byte
sectors, and under half of a ZINC-subset sequence's pairs. The backward projects again rather
than read a stored projection, writes the projection's gradient for the rows it owns and the
block's bias gradient, and sums the projection's gradient over the block's rows (the projection
bias's gradient, per sequence). Heads of any size: loads and stores are masked to ``E`` of a
power-of-two block, so nothing padded reaches memory. Dropout on the probabilities is drawn with
``tl.rand`` from a seed on the device and the element's offset; the backward draws the same mask
again. The same launch's last programs (one per :data:`ROWS_PER_PROGRAM` rows and head) write
zeros in the rows that own no position (the rows' padding), which the step reads as finite
tokens.

The products run in the accumulators' dtype (float32; float64 for float64 tests): their
operands are small blocks in registers, and Triton's interpreter multiplies bf16 blocks wrongly
(``tl.dot`` of two bf16 blocks, triton 3.6), so bf16 inputs are widened as they load.
These run under ``TRITON_INTERPRET=1`` on CPU tensors too (``tests/gpu``: the image twin).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

#: Rows per orphan-zeroing program.
ROWS_PER_PROGRAM = 32
ROWS: tl.constexpr = tl.constexpr(ROWS_PER_PROGRAM)
#: Columns of ``x`` and of the weight per step of the projection (``tl.dot``'s least inner size).
CHUNK: tl.constexpr = tl.constexpr(16)


@triton.jit
def _weight(w_ptr, weight_rows, columns, e, dim: tl.constexpr, head_dim: tl.constexpr,
            ACC: tl.constexpr):
    """A ``[BLOCK_E, CHUNK]`` block of the weight: ``weight_rows``, ``columns``."""
    return tl.load(w_ptr + weight_rows[:, None] * dim + columns[None, :],
                   mask=(e[:, None] < head_dim) & (columns[None, :] < dim), other=0.0).to(ACC)


@triton.jit
def _project(x_ptr, w_ptr, rows, inside, r, h, dim: tl.constexpr, head_dim: tl.constexpr,
             BLOCK_L: tl.constexpr, BLOCK_E: tl.constexpr, ACC: tl.constexpr):
    """Head ``h``'s ``q, k, v`` of the rows, ``x[rows] @ W_r[part, h].T`` for each part.

    ``CHUNK`` columns of the rows at a time, each loaded once for the three parts.
    """
    e = tl.arange(0, BLOCK_E)
    d = tl.arange(0, CHUNK)
    weight_rows = r * (3 * dim) + h * head_dim + e
    q = tl.zeros((BLOCK_L, BLOCK_E), dtype=ACC)
    k = tl.zeros((BLOCK_L, BLOCK_E), dtype=ACC)
    v = tl.zeros((BLOCK_L, BLOCK_E), dtype=ACC)
    for first in tl.static_range(0, dim, CHUNK):
        columns = first + d
        x = tl.load(x_ptr + rows[:, None] * dim + columns[None, :],
                    mask=inside[:, None] & (columns[None, :] < dim), other=0.0).to(ACC)
        q += tl.dot(x, tl.trans(_weight(w_ptr, weight_rows, columns, e, dim, head_dim, ACC)),
                    out_dtype=ACC)
        k += tl.dot(x, tl.trans(_weight(w_ptr, weight_rows + dim, columns, e, dim, head_dim,
                                        ACC)), out_dtype=ACC)
        v += tl.dot(x, tl.trans(_weight(w_ptr, weight_rows + 2 * dim, columns, e, dim, head_dim,
                                        ACC)), out_dtype=ACC)
    return q, k, v


@triton.jit
def _block(x_ptr, w_ptr, qkv_bias_ptr, seq_row_ptr, row_seq_ptr, graph_ptr, bias_ptr, seed_ptr,
           s, h, replica_sequences, length, heads, dim: tl.constexpr, head_dim: tl.constexpr,
           scale, dropout_p, BLOCK_L: tl.constexpr, BLOCK_E: tl.constexpr,
           DROPOUT: tl.constexpr, ACC: tl.constexpr):
    """The block's rows, ownership, q, k, v, bias pairs, probabilities and dropout keep mask."""
    i = tl.arange(0, BLOCK_L)
    e = tl.arange(0, BLOCK_E)
    inside = i < length
    position = s * length + i
    rows = tl.load(seq_row_ptr + position, mask=inside, other=0)
    owned = inside & (tl.load(row_seq_ptr + rows, mask=inside, other=-1) == position)
    # the sequence's replica's projection (replica r: sequences r * replica_sequences on)
    r = s // replica_sequences
    at = r * (3 * dim) + h * head_dim + e
    heads_e = e < head_dim
    q, k, v = _project(x_ptr, w_ptr, rows, inside, r, h, dim, head_dim, BLOCK_L, BLOCK_E, ACC)
    q += tl.load(qkv_bias_ptr + at, mask=heads_e, other=0.0).to(ACC)[None, :]
    k += tl.load(qkv_bias_ptr + at + dim, mask=heads_e, other=0.0).to(ACC)[None, :]
    v += tl.load(qkv_bias_ptr + at + 2 * dim, mask=heads_e, other=0.0).to(ACC)[None, :]
    loads = inside[:, None] & heads_e[None, :]
    # the bias [S, L, L, H], heads last, read only at pairs of one graph (a few sectors of
    # each query's row); other keys -inf. Padding positions (graph -1) and those past the
    # length (-2) see their own kind with bias 0: finite scores, never stored, whose zero
    # gradients must not meet a NaN.
    graph = tl.load(graph_ptr + position, mask=inside, other=-2)
    same = graph[:, None] == graph[None, :]
    pair = same & (graph[:, None] >= 0)
    block = ((s * length + i[:, None]) * length + i[None, :]) * heads + h
    bias = tl.load(bias_ptr + block, mask=pair, other=0.0).to(ACC)
    bias = tl.where(same, bias, float("-inf"))
    scores = tl.dot(q, tl.trans(k), out_dtype=ACC) * scale + bias
    scores = scores - tl.max(scores, 1)[:, None]
    probs = tl.exp(scores)
    probs = probs / tl.sum(probs, 1)[:, None]
    keep = probs == probs  # all true
    if DROPOUT:
        offsets = ((s * heads + h) * BLOCK_L + i[:, None]) * BLOCK_L + i[None, :]
        keep = tl.rand(tl.load(seed_ptr), offsets) >= dropout_p
    return rows, owned, loads, q, k, v, pair, block, probs, keep


@triton.jit
def _zero_orphans(out_ptr, seq_row_ptr, row_seq_ptr, block, h, count, width: tl.constexpr,
                  dim: tl.constexpr, head_dim: tl.constexpr, PARTS: tl.constexpr,
                  BLOCK_E: tl.constexpr):
    """Zeros in head ``h``'s columns of each of ``PARTS`` parts of orphan rows of a block."""
    r = block * ROWS + tl.arange(0, ROWS)
    inside = r < count
    position = tl.load(row_seq_ptr + r, mask=inside, other=0)
    orphan = inside & (tl.load(seq_row_ptr + position, mask=inside, other=0) != r)
    e = tl.arange(0, BLOCK_E)
    where = r[:, None] * width + h * head_dim + e[None, :]
    stores = orphan[:, None] & (e[None, :] < head_dim)
    zeros = tl.zeros((ROWS, BLOCK_E), dtype=out_ptr.dtype.element_ty)
    for part in tl.static_range(PARTS):
        tl.store(out_ptr + where + part * dim, zeros, mask=stores)


@triton.jit
def _forward(x_ptr, w_ptr, qkv_bias_ptr, seq_row_ptr, row_seq_ptr, graph_ptr, bias_ptr, seed_ptr,
             out_ptr, count, rows_count, replica_sequences, length, heads, dim: tl.constexpr,
             head_dim: tl.constexpr, scale, dropout_p, BLOCK_L: tl.constexpr,
             BLOCK_E: tl.constexpr, DROPOUT: tl.constexpr, ACC: tl.constexpr):
    s, h = tl.program_id(0), tl.program_id(1)
    if s >= count:
        _zero_orphans(out_ptr, seq_row_ptr, row_seq_ptr, s - count, h, rows_count, dim, dim,
                      head_dim, 1, BLOCK_E)
    else:
        rows, owned, loads, q, k, v, pair, block, probs, keep = _block(
            x_ptr, w_ptr, qkv_bias_ptr, seq_row_ptr, row_seq_ptr, graph_ptr, bias_ptr, seed_ptr,
            s, h, replica_sequences, length, heads, dim, head_dim, scale, dropout_p, BLOCK_L,
            BLOCK_E, DROPOUT, ACC)
        if DROPOUT:
            probs = tl.where(keep, probs / (1.0 - dropout_p), 0.0)
        out = tl.dot(probs, v, out_dtype=ACC)
        e = tl.arange(0, BLOCK_E)
        tl.store(out_ptr + rows[:, None] * dim + h * head_dim + e[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=owned[:, None] & loads)


@triton.jit
def _gradients(grad_ptr, x_ptr, w_ptr, qkv_bias_ptr, seq_row_ptr, row_seq_ptr, graph_ptr,
               bias_ptr, seed_ptr, grad_qkv_ptr, grad_bias_ptr, sums_ptr, s, h,
               replica_sequences, length, heads, dim: tl.constexpr, head_dim: tl.constexpr,
               scale, dropout_p, BLOCK_L: tl.constexpr, BLOCK_E: tl.constexpr,
               DROPOUT: tl.constexpr, ACC: tl.constexpr):
    """One (sequence, head) block's gradients: its owned rows' q, k, v and their sums, its bias.

    The bias's only at pairs of one graph (the rest of ``grad_bias`` is left as it was).
    """
    rows, owned, loads, q, k, v, pair, block, probs, keep = _block(
        x_ptr, w_ptr, qkv_bias_ptr, seq_row_ptr, row_seq_ptr, graph_ptr, bias_ptr, seed_ptr, s,
        h, replica_sequences, length, heads, dim, head_dim, scale, dropout_p, BLOCK_L, BLOCK_E,
        DROPOUT, ACC)
    e = tl.arange(0, BLOCK_E)
    stores = owned[:, None] & loads
    # a position's output reached the step only where it was stored: its own row's
    grad = tl.load(grad_ptr + rows[:, None] * dim + h * head_dim + e[None, :], mask=stores,
                   other=0.0).to(ACC)
    dropped = probs
    if DROPOUT:
        dropped = tl.where(keep, probs / (1.0 - dropout_p), 0.0)
    grad_v = tl.where(stores, tl.dot(tl.trans(dropped), grad, out_dtype=ACC), 0.0)
    grad_probs = tl.dot(grad, tl.trans(v), out_dtype=ACC)
    if DROPOUT:
        grad_probs = tl.where(keep, grad_probs / (1.0 - dropout_p), 0.0)
    grad_scores = probs * (grad_probs - tl.sum(grad_probs * probs, 1)[:, None])
    tl.store(grad_bias_ptr + block, grad_scores.to(grad_bias_ptr.dtype.element_ty), mask=pair)
    grad_q = tl.where(stores, tl.dot(grad_scores, k, out_dtype=ACC) * scale, 0.0)
    grad_k = tl.where(stores, tl.dot(tl.trans(grad_scores), q, out_dtype=ACC) * scale, 0.0)
    where = rows[:, None] * (3 * dim) + h * head_dim + e[None, :]
    sums = sums_ptr + s * (3 * dim) + h * head_dim + e
    kind = grad_qkv_ptr.dtype.element_ty
    tl.store(grad_qkv_ptr + where, grad_q.to(kind), mask=stores)
    tl.store(grad_qkv_ptr + where + dim, grad_k.to(kind), mask=stores)
    tl.store(grad_qkv_ptr + where + 2 * dim, grad_v.to(kind), mask=stores)
    heads_e = e < head_dim
    tl.store(sums, tl.sum(grad_q, 0), mask=heads_e)
    tl.store(sums + dim, tl.sum(grad_k, 0), mask=heads_e)
    tl.store(sums + 2 * dim, tl.sum(grad_v, 0), mask=heads_e)


@triton.jit
def _backward(grad_ptr, x_ptr, w_ptr, qkv_bias_ptr, seq_row_ptr, row_seq_ptr, graph_ptr, bias_ptr,
              seed_ptr, grad_qkv_ptr, grad_bias_ptr, sums_ptr, count, rows_count, replica_sequences,
              length, heads, dim: tl.constexpr, head_dim: tl.constexpr, scale, dropout_p,
              BLOCK_L: tl.constexpr, BLOCK_E: tl.constexpr, DROPOUT: tl.constexpr,
              ACC: tl.constexpr):
    s, h = tl.program_id(0), tl.program_id(1)
    if s >= count:
        _zero_orphans(grad_qkv_ptr, seq_row_ptr, row_seq_ptr, s - count, h, rows_count,
                      3 * dim, dim, head_dim, 3, BLOCK_E)
    else:
        _gradients(grad_ptr, x_ptr, w_ptr, qkv_bias_ptr, seq_row_ptr, row_seq_ptr, graph_ptr,
                   bias_ptr, seed_ptr, grad_qkv_ptr, grad_bias_ptr, sums_ptr, s, h,
                   replica_sequences, length, heads, dim, head_dim, scale, dropout_p, BLOCK_L,
                   BLOCK_E, DROPOUT, ACC)


def _launch(x: Tensor, qkv_bias: Tensor, bias: Tensor,
            dropout_p: float) -> tuple[tuple[int, int], tuple[int, ...], dict]:
    """The grid, the kernels' sizes and their constants.

    The grid: the sequences' programs, then the orphan blocks', per head. The sizes, in the
    kernels' order: sequences, rows, sequences per replica, ``L``, heads, ``D``, ``E``.
    """
    count, length, _, heads = bias.shape
    rows, dim = x.shape
    grid = (count + triton.cdiv(rows, ROWS_PER_PROGRAM), heads)
    sizes = (count, rows, count // len(qkv_bias), length, heads, dim, dim // heads)
    return grid, sizes, {"BLOCK_L": max(16, triton.next_power_of_2(length)),  # tl.dot's least
                         "BLOCK_E": max(16, triton.next_power_of_2(dim // heads)),
                         "DROPOUT": dropout_p > 0,
                         "ACC": tl.float64 if x.dtype == torch.float64 else tl.float32}


def forward(x: Tensor, weight: Tensor, qkv_bias: Tensor, sequence_row: Tensor,
            row_sequence: Tensor, sequence_graph: Tensor, bias: Tensor, seed: Tensor,
            dropout_p: float, scale: float, out: Tensor) -> None:
    """Writes each row's attention into ``out`` ``[T, D]`` (orphans: zeros); shapes as the op's."""
    grid, sizes, constants = _launch(x, qkv_bias, bias, dropout_p)
    _forward[grid](x, weight, qkv_bias, sequence_row, row_sequence, sequence_graph, bias, seed,
                   out, *sizes, scale, dropout_p, **constants)


def backward(grad: Tensor, x: Tensor, weight: Tensor, qkv_bias: Tensor, sequence_row: Tensor,
             row_sequence: Tensor, sequence_graph: Tensor, bias: Tensor, seed: Tensor,
             dropout_p: float, scale: float, grad_qkv: Tensor, grad_bias: Tensor,
             sums: Tensor) -> None:
    """Writes the projection's and ``bias``'s gradients and the former's per-sequence sums.

    Shapes: ``grad_qkv`` ``[T, 3D]``, ``grad_bias`` ``[S, L, L, H]`` (at pairs of one graph
    only), ``sums`` ``[S, 3D]``.
    """
    grid, sizes, constants = _launch(x, qkv_bias, bias, dropout_p)
    _backward[grid](grad, x, weight, qkv_bias, sequence_row, row_sequence, sequence_graph, bias,
                    seed, grad_qkv, grad_bias, sums, *sizes, scale, dropout_p, **constants)
