"""The CPU wing's torch attention path (where the fused kernel does not run), head dim first.

:func:`biased_attention` takes queries, keys and values as ``[G, d, L]``: with ``d = 10``, MKL's
batched products with only ``d`` output columns run at a third of the speed of the same products
transposed (5 against 16 GFLOP/s for 1,024 matrices of 29 x 29 by 29 x 10); backward keeps the
probabilities and a ``uint8`` mask (5 bytes a score where autograd keeps 12), or for large score
tensors only the inputs and the mask's seed. :func:`attend_head_major` computes the projections
transposed, ``W x^T`` with the weight's rows head-minor (:func:`head_minor_rows`), so every
``[d, L]`` matrix of the head-major batch ``g = h * B + b`` is a view: from the token-major
projection, transposing copies of runs of ``d`` floats took ~10% of a ZINC training step on one
core. Parameters keep ``nn.Linear``'s layout.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

from graphormer_sepnorm.nn.cpu.dropout import keep_mask
from graphormer_sepnorm.nn.cpu.native import keep_scale
from graphormer_sepnorm.nn.cpu.native.fused_attention import RECOMPUTE_ABOVE, fused_attention


def _probabilities(q_t: Tensor, k_t: Tensor, bias: Tensor, scale: float, p: float,
                   seed: int) -> tuple[Tensor, Tensor | None]:
    """Softmax probabilities ``[G, Lq, L]`` and the keep mask (``None`` without dropout)."""
    probs = torch.baddbmm(bias, q_t.transpose(1, 2), k_t, alpha=scale).softmax(-1)
    if p == 0:
        return probs, None
    return probs, keep_mask(probs.shape, p, torch.Generator().manual_seed(seed))[0]


def _dropped(probs: Tensor, keep: Tensor | None) -> Tensor:
    """The probabilities with the dropped ones zeroed (not rescaled: see ``keep_scale``)."""
    return probs if keep is None else keep.to(probs.dtype).mul_(probs)


class _BiasedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx: FunctionCtx, q_t: Tensor, k_t: Tensor, v_t: Tensor, bias: Tensor,
                scale: float, p: float, recompute: bool) -> Tensor:
        # One draw from the global generator: seeding torch still makes runs reproducible.
        seed = int(torch.randint(0, 2**62, (1,))) if p > 0 else 0
        probs, keep = _probabilities(q_t, k_t, bias, scale, p, seed)
        ctx.scale, ctx.p, ctx.seed, ctx.recompute = scale, p, seed, recompute
        # The dropout rescale is applied to the small [G, d, Lq] side, not to the scores.
        ctx.keep_scale = 1.0 if keep is None else keep_scale(p)
        # Either the inputs (recompute) or the probabilities and a uint8 mask: 5 bytes a score.
        ctx.save_for_backward(q_t, k_t, v_t, bias if recompute else probs,
                              None if recompute else keep)
        dropped = _dropped(probs, keep)
        out_t = torch.bmm(v_t, dropped.transpose(1, 2))
        return out_t if keep is None else out_t.mul_(ctx.keep_scale)

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_out_t: Tensor) -> tuple[Tensor | None, ...]:
        q_t, k_t, v_t, saved, keep = ctx.saved_tensors
        if ctx.recompute:
            probs, keep = _probabilities(q_t, k_t, saved, ctx.scale, ctx.p, ctx.seed)
        else:
            probs = saved
        if keep is not None:
            grad_out_t = grad_out_t * ctx.keep_scale
        dropped = _dropped(probs, keep)
        grad_v_t = torch.bmm(grad_out_t, dropped)
        grad = torch.bmm(grad_out_t.transpose(1, 2), v_t)  # d loss / d dropped probabilities
        if keep is not None:
            grad.mul_(keep)
        grad = torch.ops.aten._softmax_backward_data(grad, probs, -1, probs.dtype)
        grad_q_t = torch.bmm(k_t, grad.transpose(1, 2)).mul_(ctx.scale)
        grad_k_t = torch.bmm(q_t, grad).mul_(ctx.scale)
        return grad_q_t, grad_k_t, grad_v_t, grad, None, None, None


def biased_attention(q_t: Tensor, k_t: Tensor, v_t: Tensor, bias: Tensor, scale: float,
                     p: float = 0.0, recompute: bool | None = None) -> Tensor:
    """``(dropout(softmax(scale * q k^T + bias)) v)^T`` on the CPU, in the transposed layout.

    Args:
        q_t: ``[G, d, Lq]`` queries, head dim first (``G`` = batch x heads).
        k_t: ``[G, d, L]`` keys.
        v_t: ``[G, d, L]`` values.
        bias: ``[G, Lq, L]`` additive bias (may require grad).
        scale: multiplies the scores, usually ``d ** -0.5``.
        p: dropout on the probabilities, with the mask of
            :func:`~graphormer_sepnorm.nn.cpu.dropout.keep_mask`. Default: 0.
        recompute: keep only the inputs and recompute the scores in backward instead of
            keeping probabilities and mask. Default: above :data:`RECOMPUTE_ABOVE` scores.

    Returns:
        ``[G, d, Lq]``: the attention output, transposed.
    """
    if recompute is None:
        recompute = bias.numel() > RECOMPUTE_ABOVE
    return _BiasedAttention.apply(q_t, k_t, v_t, bias, scale, p, recompute)


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
