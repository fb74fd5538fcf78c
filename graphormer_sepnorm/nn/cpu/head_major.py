"""CPU attention blocks with the projections computed transposed, straight into ``[H * B, d, L]``.

From the token-major projection ``[B * L, 3 * D]``, the ``[G, d, L]`` layout of
:func:`~.attention_core.biased_attention` takes transposing copies of runs of ``d = 10`` floats,
~10% of a ZINC training step on one core. Here ``W x^T`` (``[3 * D, B * L]``) with the weight's
rows head-minor (:func:`head_minor_rows`) makes every ``[d, L]`` matrix of the head-major batch
``g = h * B + b`` a view; backward copies runs of ``L`` floats. Parameters keep ``nn.Linear``'s
layout.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx

from graphormer_sepnorm.nn.cpu.attention_core import biased_attention
from graphormer_sepnorm.nn.cpu.native.fused_attention import fused_attention


def head_minor_rows(weight: Tensor, num_heads: int, blocks: int) -> Tensor:
    """Rows of ``weight`` (``blocks`` blocks of ``H * d`` head-major rows) as ``(d, H)`` rows.

    ``[blocks * H * d, ...]`` -> same shape; row ``(s, h, j)`` moves to ``(s, j, h)``.
    """
    rest = weight.shape[1:]
    return (weight.reshape(blocks, num_heads, -1, *rest).transpose(1, 2)
            .reshape(weight.shape))


class _SplitHeads(torch.autograd.Function):
    """``[3 * d * H, B * L]`` (rows ``(s, j, h)``) -> three ``[H * B, d, L]`` views."""

    @staticmethod
    def forward(ctx: FunctionCtx, qkv_t: Tensor, num_heads: int, batch: int,
                length: int) -> tuple[Tensor, Tensor, Tensor]:
        shape = (3, qkv_t.shape[0] // (3 * num_heads), num_heads, batch, length)
        ctx.shape = shape  # type: ignore[attr-defined]
        q_t, k_t, v_t = (qkv_t.view(shape).permute(0, 2, 3, 1, 4)
                         .reshape(3, num_heads * batch, shape[1], length))
        return q_t, k_t, v_t

    @staticmethod
    def backward(ctx: FunctionCtx, *grads: Tensor) -> tuple[Tensor, None, None, None]:
        shape = ctx.shape  # type: ignore[attr-defined]
        _, head_dim, num_heads, batch, length = shape
        grad = grads[0].new_empty(shape)
        # autograd materializes unused outputs' gradients as zeros, so none is None here
        for block, part in enumerate(grads):
            # contiguous [H, B, d, L] into the [d, H, B, L] block: runs of L floats
            grad[block].permute(1, 2, 0, 3).copy_(part.view(num_heads, batch, head_dim, length))
        return grad.view(-1, batch * length), None, None, None


def _projected_t(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """``W x^T + b``: ``[B, L, D]`` tokens -> ``[3 * D, B * L]``, a row per projected feature."""
    return torch.mm(weight, x.reshape(-1, x.shape[-1]).t()).add_(bias[:, None])


def attend_head_major(x: Tensor, qkv_weight: Tensor, qkv_bias: Tensor, out_weight_t: Tensor,
                      out_bias: Tensor, bias: Tensor, num_heads: int,
                      num_queries: int | None = None, dropout_p: float = 0.0) -> Tensor:
    """Projections, biased attention and output projection of one block of graphs.

    Args:
        x: ``[B, L, D]`` normalized tokens.
        qkv_weight: ``[3 * D, D]``, rows reordered by :func:`head_minor_rows` (3 blocks).
        qkv_bias: ``[3 * D]``, reordered the same way.
        out_weight_t: the output projection's weight transposed, ``[D, D]``, its rows
            reordered by :func:`head_minor_rows` (1 block).
        out_bias: ``[D]``.
        bias: ``[H * B, Lq, L]`` attention bias, head-major (``g = h * B + b``).
        num_heads: ``H``.
        num_queries: only the first positions attend (``Lq``); default all ``L``.
        dropout_p: dropout on the attention probabilities. Default: 0.

    Returns:
        ``[B, Lq, D]``.
    """
    b, length, dim = x.shape
    queries = length if num_queries is None else num_queries
    head_dim = dim // num_heads
    qkv_t = _projected_t(x, qkv_weight, qkv_bias)
    q_t, k_t, v_t = _SplitHeads.apply(qkv_t, num_heads, b, length)
    out_t = biased_attention(q_t[..., :queries], k_t, v_t, bias, head_dim**-0.5, dropout_p)
    # [H * B, d, Lq] -> [d * H, B * Lq], head-minor rows: runs of Lq floats
    out_t = out_t.view(num_heads, b, head_dim, queries).permute(2, 0, 1, 3).reshape(dim, -1)
    return torch.addmm(out_bias, out_t.t(), out_weight_t).view(b, queries, dim)


def attend_groups_fused(tokens: Tensor, qkv_weight: Tensor, qkv_bias: Tensor,
                        out_weight_t: Tensor, out_bias: Tensor, biases: list[Tensor],
                        counts: list[int], lengths: list[int], num_heads: int,
                        dropout_p: float = 0.0) -> Tensor:
    """:func:`attend_head_major` for all size groups at once, through the fused C kernel.

    One product per projection and one autograd node whatever the number of groups.

    Args:
        tokens: ``[T, D]`` normalized tokens, group after group, each graph cut to its group's
            length (:meth:`~graphormer_sepnorm.nn.cpu.size_groups.SizeGroups.token_rows`).
        qkv_weight: ``[3 * D, D]`` as ``nn.Linear`` holds it (the kernel reads the rows
            through strides).
        qkv_bias: ``[3 * D]``.
        out_weight_t: the output projection's weight, transposed, ``[D, D]``.
        out_bias: ``[D]``.
        biases: each group's bias ``[H * B_g, L_g, L_g]``, keys-first.
        counts: each group's ``B_g``.
        lengths: each group's ``L_g``.
        num_heads: ``H``.
        dropout_p: dropout on the attention probabilities. Default: 0.

    Returns:
        ``[T, D]``.
    """
    dim = tokens.shape[1]
    qkv_t = _projected_t(tokens, qkv_weight, qkv_bias)
    out_t = fused_attention(qkv_t, biases, num_heads, counts, (dim // num_heads)**-0.5,
                            dropout_p, lengths=lengths)
    return torch.addmm(out_bias, out_t.t(), out_weight_t)
