"""The CPU wing's encoder: the reference model's own modules run on packed size groups.

Every token-wise part runs on the groups' ``T = sum B_g * L_g`` token rows (:mod:`.size_groups`)
instead of the padded ``B * L``; how each part is computed: ``docs/concepts/device_wings.md``.
Outputs, gradients and BatchNorm statistics equal the reference's up to float rounding
(``tests/nn/test_backends.py``); dropout draws differ.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphormer_sepnorm.data.batch import GraphormerBatch
from graphormer_sepnorm.nn.cpu.dropout import dropout
from graphormer_sepnorm.nn.cpu.fused_sepnorm import layer_norm_batch_norm_rows
from graphormer_sepnorm.nn.cpu.group_bias import group_biases
from graphormer_sepnorm.nn.cpu.head_major import (
    attend_groups_fused,
    attend_head_major,
    head_minor_rows,
)
from graphormer_sepnorm.nn.cpu.hops import pair_bias
from graphormer_sepnorm.nn.cpu.native import fused_attention
from graphormer_sepnorm.nn.cpu.size_groups import SizeGroups
from graphormer_sepnorm.nn.layer import GraphormerLayer
from graphormer_sepnorm.nn.model import Graphormer
from graphormer_sepnorm.nn.sepnorm import GraphTokenBatchNorm, SepNorm, ShareNorm


def why_not(model: Graphormer, batch: GraphormerBatch) -> str | None:
    """Why the CPU backend cannot run ``model`` on ``batch``; ``None`` when it can."""
    dtype = model.graph_token.dtype
    if batch.node_mask.device.type != "cpu" or model.graph_token.device.type != "cpu":
        return "it runs on CPU tensors only"
    if not isinstance(batch, GraphormerBatch):
        return "it reads the collator's batches, not the grid engine's"
    if dtype not in (torch.float32, torch.float64) or torch.is_autocast_enabled("cpu"):
        return "it runs in float32 and float64, outside autocast"
    norms = [n for layer in model.layers for n in (layer.attn_norm, layer.ffn_norm)]
    if not all(isinstance(n, ShareNorm) or isinstance(n, SepNorm)
               and isinstance(n.tok_norm, (nn.LayerNorm, nn.Identity))
               for n in [*norms, model.final_norm]):
        return "it needs per-token atom norms (tok_norm 'layer' or 'none')"
    return None


@torch.compiler.disable  # its C kernels are opaque to dynamo: a compiled model runs it eagerly
def encode(model: Graphormer, batch: GraphormerBatch, graph_token_only: bool) -> Tensor:
    """:meth:`Graphormer.encode`'s tokens, ``[B, 1 + N, D]`` (``[B, 1, D]`` if graph only)."""
    x = model.embed_tokens(batch)
    b, length, dim = x.shape
    heads = model.config.num_heads
    groups = SizeGroups.plan(batch.node_mask, heads) or SizeGroups.whole(b, length)
    inverse, node_mask = groups.inverse, batch.node_mask
    if groups.order is not None:
        x, node_mask = x.index_select(0, groups.order), node_mask[groups.order]
        groups = replace(groups, order=None, inverse=None)
    groups = replace(groups, fused=fused_attention.usable(x, dim // heads))
    bias = model.attention_bias
    biases = group_biases(pair_bias(bias, batch).to(x.dtype), bias.virtual_distance.to(x.dtype),
                          groups, node_mask, batch.pair_slot, inverse)
    rows = groups.token_rows(x.device)
    if rows is None:
        rows = torch.arange(b * length, device=x.device)
    tokens = x.reshape(b * length, dim).index_select(0, rows)
    tokens = dropout(tokens, model.input_dropout.p, model.training)
    graph_rows = (rows % length == 0).nonzero().squeeze(1)
    for index, layer in enumerate(model.layers):
        last = graph_token_only and index == len(model.layers) - 1
        tokens, graph_rows = _layer(layer, tokens, graph_rows, groups, biases, last)
    tokens = normalize_rows(model.final_norm, tokens, graph_rows)
    if graph_token_only:
        out = tokens.index_select(0, graph_rows)[:, None]
    else:
        out = tokens.new_zeros(b * length, dim).index_copy(0, rows, tokens).view(b, length, dim)
    return out if inverse is None else out.index_select(0, inverse)


def _layer(layer: GraphormerLayer, x: Tensor, graph_rows: Tensor, groups: SizeGroups,
           biases: list[Tensor], graph_token_only: bool) -> tuple[Tensor, Tensor]:
    """:meth:`GraphormerLayer.forward` on token rows ``x`` ``[T, D]``.

    ``graph_rows`` ``[B]``: the graph tokens' rows. With ``graph_token_only`` the output is the
    graph tokens' rows ``[B, D]`` (the rows are then ``0..B-1``).
    """
    training, p = layer.training, layer.dropout.p
    attended = attend(layer.attention, normalize_rows(layer.attn_norm, x, graph_rows), groups,
                      biases)
    if graph_token_only:
        x, attended = x.index_select(0, graph_rows), attended.index_select(0, graph_rows)
        graph_rows = torch.arange(len(graph_rows), device=x.device)
    x = dropout(attended, p, training, residual=x)
    first, _, activation_dropout, second = layer.ffn
    hidden = F.gelu(first(normalize_rows(layer.ffn_norm, x, graph_rows)))
    hidden = dropout(hidden, activation_dropout.p, training)
    return dropout(second(hidden), p, training, residual=x), graph_rows


def attend(attention: nn.Module, x: Tensor, groups: SizeGroups, biases: list[Tensor]) -> Tensor:
    """Attention with the output projection on packed groups ``x`` ``[T, D]`` -> ``[T, D]``.

    ``biases``: each group's ``[H * B_g, L_g, L_g]`` (keys-first when ``groups.fused``).
    """
    heads, qkv, out = attention.num_heads, attention.qkv, attention.out
    p = attention.dropout if attention.training else 0.0
    if groups.fused:
        return attend_groups_fused(x, qkv.weight, qkv.bias, out.weight.t(), out.bias, biases,
                                   groups.counts, groups.lengths, heads, p)
    projections = (head_minor_rows(qkv.weight, heads, 3), head_minor_rows(qkv.bias, heads, 3),
                   head_minor_rows(out.weight.t(), heads, 1), out.bias)
    parts, start = [], 0
    for count, length, bias in zip(groups.counts, groups.lengths, biases, strict=True):
        part = x[start:start + count * length].view(count, length, -1)
        parts.append(attend_head_major(part, *projections, bias, heads, None, p).flatten(0, 1))
        start += count * length
    return torch.cat(parts) if len(parts) > 1 else parts[0]


def normalize_rows(norm: nn.Module, x: Tensor, graph_rows: Tensor) -> Tensor:
    """A :class:`SepNorm` or :class:`ShareNorm` on token rows ``x`` ``[T, D]``.

    ``graph_rows`` ``[B]``: the graph tokens' rows. The atom norm must be per token (padding
    rows are normalized too and read by nothing).
    """
    if isinstance(norm, ShareNorm):
        return norm(x)
    cls_norm, tok_norm = norm.cls_norm, norm.tok_norm
    if (isinstance(cls_norm, GraphTokenBatchNorm) and isinstance(tok_norm, nn.LayerNorm)
            and cls_norm.momentum is not None and not cls_norm.synchronized()):
        return layer_norm_batch_norm_rows(x, graph_rows, tok_norm, cls_norm,
                                          cls_norm.uses_batch_statistics(len(graph_rows)))
    return tok_norm(x).index_copy(0, graph_rows, cls_norm(x.index_select(0, graph_rows)))
