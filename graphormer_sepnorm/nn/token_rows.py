"""The encoder on packed token rows: token-wise work on real tokens only, attention on the grid.

A grid batch pads every molecule to the batch's ``N`` atoms, and the layers' token-wise work
(norms, projections, FFN, dropouts, residuals: most of a GPU step's bytes) runs on all
``B * (1 + N)`` positions. ZINC-subset's random batches of 256 pad to 40 atoms where molecules
average 23, and MolHIV's training batches to 224 where they average 25. Attention is the only
part of a layer that mixes positions, so here the tokens live as packed rows ``[T, D]``
(``T = B + atom_rows``: the graph tokens, then the real atoms, then a little padding to a fixed
count, :attr:`~graphormer_sepnorm.data.collate.GraphormerBatch.row_position`), and each layer
gathers its projected ``q, k, v`` into the ``[B, 1 + N]`` grid for attention and gathers the
attention's output back into rows. The same modules and parameters compute the same function as
:meth:`Graphormer.encode <graphormer_sepnorm.nn.model.Graphormer.encode>` up to float rounding:
padded grid positions read some other row, a finite token that the bias masks as a key, and
padded queries and padding rows reach no real token, so their gradients are exactly zero.
Dropout draws differ (other shapes).

Batches may also place the tokens in attention sequences, several molecules to a sequence
(:mod:`~graphormer_sepnorm.data.sequences`): ``q, k, v`` are then gathered into ``[S, L]``
instead of the grid, with a block-diagonal bias; the rest is the same.

The atom norms must be per token (``tok_norm`` ``'layer'`` or ``'none'``): padding rows would
enter a BatchNorm over atoms (:func:`applies`). The CPU backend does the same with size groups
(:mod:`~graphormer_sepnorm.nn.cpu.encoder`); this module is for grid batches, whose shapes stay
static, so a compiled step compiles once.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from graphormer_sepnorm.data.collate import GraphormerBatch
from graphormer_sepnorm.nn import row_attention
from graphormer_sepnorm.nn.attention import BiasedMultiheadAttention
from graphormer_sepnorm.nn.bias_encoders import AttentionBias, padded_keys
from graphormer_sepnorm.nn.layer import GraphormerLayer
from graphormer_sepnorm.nn.precision import in_activation_dtype
from graphormer_sepnorm.nn.sepnorm import SepNorm, ShareNorm

if TYPE_CHECKING:
    from graphormer_sepnorm.nn.model import Graphormer


#: Whether batches with token rows run on them, from ``GRAPHORMER_SEPNORM_TOKEN_ROWS`` when the
#: package is imported (``0``: on their grid, the same function). A lease's fallback: written
#: 2026-11-28, the rows path has not run on a GPU yet.
ENABLED = os.environ.get("GRAPHORMER_SEPNORM_TOKEN_ROWS", "1") != "0"


def applies(model: Graphormer, batch: GraphormerBatch) -> bool:
    """Whether :func:`encode` runs ``model`` on ``batch``: it has rows, every norm is per token.

    Never when :data:`ENABLED` is false.
    """
    if not ENABLED or batch.row_position is None or batch.position_row is None:
        return False
    norms = [n for layer in model.layers for n in (layer.attn_norm, layer.ffn_norm)]
    return all(isinstance(n, ShareNorm) or isinstance(n, SepNorm)
               and isinstance(n.tok_norm, (nn.LayerNorm, nn.Identity))
               for n in [*norms, model.final_norm])


def encode(model: Graphormer, batch: GraphormerBatch, graph_token_only: bool) -> Tensor:
    """:meth:`Graphormer.encode`'s tokens ``[B, 1 + N, D]`` (``[B, 1, D]`` if graph only).

    Padded grid positions of the output hold some row's values (the grid layout's padding is
    unspecified, see :meth:`Graphormer.embed_tokens`).
    """
    b, n = batch.node_mask.shape
    x = in_activation_dtype(model.input_dropout(embed_rows(model, batch)))
    kernel = batch.sequence_graph is not None and \
        row_attention.applies(x, batch.sequence_graph.shape[-1])
    bias = model.attention_bias(batch) if batch.sequence_graph is None else \
        sequence_bias(model.attention_bias, batch, heads_last=kernel, dtype=x.dtype)
    bias = bias.to(x.dtype)
    for index, layer in enumerate(model.layers):
        last = graph_token_only and index == len(model.layers) - 1
        if last and batch.sequence_graph is not None:
            # only the graph tokens attend: on the grid, whose graph-token rows need no pairs
            bias = graph_token_bias(model.attention_bias, batch).to(x.dtype)
        x = layer_rows(layer, x, bias, batch, last, kernel)
    x = normalize_rows(model.final_norm, x, b)
    if graph_token_only:
        return x[:b, None]
    return x.index_select(0, batch.position_row).view(b, 1 + n, -1)


def sequence_bias(encoders: AttentionBias, batch: GraphormerBatch, heads_last: bool = False,
                  dtype: torch.dtype | None = None) -> Tensor:
    """The bias of attention sequences ``[S, H, L, L]``: block-diagonal, one block a graph.

    Within a graph as on the grid (:class:`~graphormer_sepnorm.nn.bias_encoders.AttentionBias`:
    a pair of atoms its pair bias, a pair with the graph token the virtual distance); ``-inf``
    between graphs (:func:`~.row_attention.graph_pairs`). Padding positions share graph ``-1``
    and see each other with bias 0, so each sees some finite key and softmax never yields NaN.
    Only pairs of one graph pass a gradient back (the row attention kernels leave the others'
    unwritten). ``heads_last``: ``[S, L, L, H]``, the pairs' own order, which the row
    attention kernels read (the pair bias's sums over hops then write it in place, with no
    permuted float32 copy between). ``dtype``: the pair bias's, before the virtual
    distance and ``-inf`` go in (the layers'; its gradient summed over the layers is then
    stored in it too, not in float32).
    """
    pair = encoders.pair_bias(batch)  # [S * L * L, H]: the sequences' position pairs
    pair = pair if dtype is None else pair.to(dtype)
    graph = batch.sequence_graph  # [S, L]
    count, length = graph.shape
    token = (batch.sequence_row < batch.node_mask.shape[0]).view(count, 1, length, 1)
    virtual = encoders.virtual_distance.to(pair.dtype)
    pair = pair.view(count, length, length, -1)
    within = row_attention.graph_pairs(
        graph, torch.where(token | token.transpose(1, 2), virtual, pair))
    return within if heads_last else within.permute(0, 3, 1, 2)


def graph_token_bias(encoders: AttentionBias, batch: GraphormerBatch) -> Tensor:
    """The graph tokens' rows of the grid's bias, ``[B, H, 1, 1 + N]``.

    The virtual distance to every real token of the graph, ``-inf`` to padded ones: what
    :class:`~graphormer_sepnorm.nn.bias_encoders.AttentionBias` puts in row 0.
    """
    virtual = encoders.virtual_distance
    keys = padded_keys(batch.node_mask, virtual.dtype)
    return keys[:, None, None, :] + virtual.view(1, -1, 1, 1)


def embed_rows(model: Graphormer, batch: GraphormerBatch) -> Tensor:
    """The layers' input as rows ``[B + atom_rows, D]``: graph tokens, then atoms (and padding)."""
    b, n = batch.node_mask.shape
    position = batch.row_position[b:]
    # position g * (1 + N) + 1 + i in the token grid is slot g * N + i of the atom grid
    # (a padding row at a graph token's position gets slot -1 or the slot before: any real
    # slot will do, nothing reads it)
    slot = (position - position // (1 + n) - 1).clamp(min=0)
    atoms = (model.atom_encoder(batch.x.index_select(0, slot))
             + model.degree_encoder(batch.degree.index_select(0, slot)))
    return torch.cat([model.graph_token.expand(b, -1).to(atoms.dtype), atoms])


def layer_rows(layer: GraphormerLayer, x: Tensor, bias: Tensor, batch: GraphormerBatch,
               graph_token_only: bool = False, kernel: bool = False) -> Tensor:
    """:meth:`GraphormerLayer.forward` on rows ``x`` ``[T, D]`` (``[B, D]`` if graph only).

    ``kernel``: sequences attend through :func:`~.row_attention.attend` (``bias`` heads last).
    """
    b = batch.node_mask.shape[0]
    attended = attend_rows(layer.attention, normalize_rows(layer.attn_norm, x, b), bias, batch,
                           graph_token_only, kernel)
    if graph_token_only:
        x = x[:b]
    x = x + layer.dropout(attended)
    return x + layer.dropout(layer.ffn(normalize_rows(layer.ffn_norm, x, b)))


def attend_rows(attention: BiasedMultiheadAttention, x: Tensor, bias: Tensor,
                batch: GraphormerBatch, graph_token_only: bool = False,
                kernel: bool = False) -> Tensor:
    """Attention with its projections on normalized rows ``x`` ``[T, D]`` -> ``[T, D]``.

    The projected ``q, k, v`` are gathered into the grid ``[B, 1 + N, 3 * D]``, attended there
    with ``bias`` ``[B, H, 1 + N, 1 + N]``, and the output gathered back into rows before the
    output projection; with sequences (:attr:`GraphormerBatch.sequence_graph`) the same in the
    ``[S, L]`` sequences, with their bias ``[S, H, L, L]`` (with ``kernel``, inside
    :func:`~.row_attention.attend`, the bias ``[S, L, L, H]``). With ``graph_token_only`` only the
    graph tokens attend, on the grid (``bias`` their rows, ``[B, H, 1, 1 + N]`` at least):
    ``[B, D]``.
    """
    b, n = batch.node_mask.shape
    if batch.sequence_graph is not None and not graph_token_only:
        return attention.out(attend_sequences(attention, x, bias, batch, kernel))
    qkv = attention.qkv(x).index_select(0, batch.position_row).view(b, 1 + n, -1)
    rows, _ = attention.attend(qkv, bias, queries=1 if graph_token_only else None)
    if not graph_token_only:
        rows = rows.index_select(0, batch.row_position)
    return attention.out(rows)


def attend_sequences(attention: BiasedMultiheadAttention, x: Tensor, bias: Tensor,
                     batch: GraphormerBatch, kernel: bool = False) -> Tensor:
    """Attention in sequences of normalized rows ``x`` ``[T, D]``: heads merged, ``[T, D]``.

    With ``kernel`` through :func:`~.row_attention.attend` (the ``q, k, v`` projection inside
    its kernel; ``bias`` ``[S, L, L, H]``), else ``q, k, v`` gathered into the sequences and
    the output gathered back (``bias`` ``[S, H, L, L]``).
    """
    if kernel:
        # the weight in the rows' dtype, as autocast gives F.linear
        return row_attention.attend(
            x, attention.qkv.weight.to(x.dtype), attention.qkv.bias, batch.sequence_row,
            batch.row_sequence, batch.sequence_graph, bias,
            attention.dropout if attention.training else 0.0,
            (x.shape[-1] // attention.num_heads) ** -0.5)
    qkv = attention.qkv(x).index_select(0, batch.sequence_row)
    rows, _ = attention.attend(qkv.view(*batch.sequence_graph.shape, -1), bias)
    return rows.index_select(0, batch.row_sequence)


def normalize_rows(norm: nn.Module, x: Tensor, graphs: int) -> Tensor:
    """A :class:`SepNorm` or :class:`ShareNorm` on rows ``x``, the first ``graphs`` graph tokens.

    The atom norm is per token (padding rows are normalized too, and read by nothing).
    """
    if isinstance(norm, ShareNorm):
        return norm(x)
    graph_tokens = norm.cls_norm(x[:graphs])
    if len(x) == graphs:
        return graph_tokens
    # the atom norm on every row, then a cat (ZINC-subset, K=2, gpu_roofline.py): 640 launches
    # and 4.82 GB a step; on the atom rows only, 663 and 4.86 (the slice was a copy); SepNorm's
    # select over every row, 602 and 5.13 (the step is bound by bytes)
    return torch.cat([graph_tokens, norm.tok_norm(x)[graphs:]])
