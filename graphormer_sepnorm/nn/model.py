"""Graphormer with SepNorm: the full model, usable as a plain ``nn.Module``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import Tensor, nn

from graphormer_sepnorm.data.collate import GraphormerBatch
from graphormer_sepnorm.nn.bias_encoders import AttentionBias, EdgeEncoding, padded_keys
from graphormer_sepnorm.nn.dropout import Dropout
from graphormer_sepnorm.nn.group_bias import group_biases
from graphormer_sepnorm.nn.layer import GraphormerLayer
from graphormer_sepnorm.nn.native import fused_attention
from graphormer_sepnorm.nn.node_encoders import AtomEncoder, DegreeEncoder
from graphormer_sepnorm.nn.sepnorm import NormKind, NormSite, SepNorm, ShareNorm, build_norm
from graphormer_sepnorm.nn.size_groups import SizeGroups

NORM_SITES: tuple[NormSite, ...] = ("attn", "ffn", "final")


class Graphormer(nn.Module):
    """Graphormer (Ying et al., 2021), pre-LN, with SepNorm on the graph token.

    Atoms are embedded (features + degree), a learned graph token is put at position 0, the layers
    attend with a bias computed once per batch (spatial + edge + virtual distance), a final norm
    follows, and a linear head reads the graph token out.

    Args:
        atom_feature_dims: values per atom-feature column (ZINC: ``[28]``; OGB: 9 columns).
        edge_feature_dims: values per bond-feature column (ZINC: ``[4]``; OGB: 3 columns).
        num_tasks: outputs of the head. Default: 1.
        num_layers: Default: 12.
        hidden_dim: ``D``. Default: 80.
        ffn_dim: Default: 80.
        num_heads: ``H``. Default: 8.
        dropout: on embeddings and block outputs. Default: 0.1.
        attention_dropout: Default: 0.1.
        activation_dropout: Default: 0.1.
        max_degree: Default: 64.
        max_distance: largest distance with its own spatial bucket. Default: 64.
        multi_hop_max_dist: hops of each shortest path used by the edge encoder. Default: 20.
        edge_encoding: ``'multi_hop'`` (default) or ``'simple'``.
        sepnorm: SepNorm (true, default) or ShareNorm (one LayerNorm everywhere).
        cls_norm: SepNorm's norm for the graph token. Default: ``'batch'``.
        tok_norm: SepNorm's norm for the atoms. Default: ``'layer'``.
        sepnorm_sites: where SepNorm replaces ShareNorm: any of ``'attn'`` (before attention),
            ``'ffn'`` (before the feed-forward block), ``'final'``. Default: all three. The
            first layer's attention site normalizes the graph token with a LayerNorm instead of
            ``cls_norm='batch'``: there it is the same vector in every graph.
        sync_batch_norm: under DDP, normalize the graph token with the statistics of the global
            batch (all processes), like ``SyncBatchNorm``. Default: true.
    """

    def __init__(
        self,
        atom_feature_dims: Sequence[int],
        edge_feature_dims: Sequence[int],
        num_tasks: int = 1,
        num_layers: int = 12,
        hidden_dim: int = 80,
        ffn_dim: int = 80,
        num_heads: int = 8,
        dropout: float = 0.1,
        attention_dropout: float = 0.1,
        activation_dropout: float = 0.1,
        max_degree: int = 64,
        max_distance: int = 64,
        multi_hop_max_dist: int = 20,
        edge_encoding: EdgeEncoding = "multi_hop",
        sepnorm: bool = True,
        cls_norm: NormKind = "batch",
        tok_norm: NormKind = "layer",
        sepnorm_sites: Sequence[NormSite] = NORM_SITES,
        sync_batch_norm: bool = True,
    ) -> None:
        super().__init__()
        unknown = set(sepnorm_sites) - set(NORM_SITES)
        if unknown:
            raise ValueError(f"unknown sepnorm sites {sorted(unknown)}; use {NORM_SITES}")

        def norm(site: NormSite, first: bool = False) -> nn.Module:
            # The graph token enters layer 0 as one learned vector, the same for every graph: a
            # BatchNorm over copies of it has no variance to normalize (its running variance
            # decays to 0 and evaluation divides the running mean's lag by sqrt(eps)), so there
            # it gets a LayerNorm of its own.
            cls = "layer" if first and cls_norm == "batch" else cls_norm
            return build_norm(hidden_dim, sepnorm and site in sepnorm_sites, cls, tok_norm,
                              sync_batch_norm)

        self.atom_encoder = AtomEncoder(atom_feature_dims, hidden_dim)
        self.degree_encoder = DegreeEncoder(hidden_dim, max_degree)
        self.graph_token = nn.Parameter(torch.empty(hidden_dim))
        self.attention_bias = AttentionBias(num_heads, edge_feature_dims, max_distance,
                                            multi_hop_max_dist, edge_encoding)
        self.input_dropout = Dropout(dropout)
        self.layers = nn.ModuleList(
            GraphormerLayer(hidden_dim, ffn_dim, num_heads, norm("attn", first=index == 0),
                            norm("ffn"), dropout, attention_dropout, activation_dropout)
            for index in range(num_layers)
        )
        self.final_norm = norm("final")
        self.head = nn.Linear(hidden_dim, num_tasks)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Graphormer's initialization: Normal(0, 0.02) weights, zero biases, unit norms."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.02)
                nn.init.zeros_(module.bias)
            elif isinstance(module, (nn.LayerNorm, nn.BatchNorm1d)):
                module.reset_parameters()
        self.atom_encoder.reset_parameters()
        self.degree_encoder.reset_parameters()
        self.attention_bias.reset_parameters()
        nn.init.normal_(self.graph_token, std=0.02)

    def encode(self, batch: GraphormerBatch, need_weights: bool = False,
               graph_token_only: bool = False) -> tuple[Tensor, list[Tensor]]:
        """Runs the encoder.

        Args:
            batch: the collated graphs.
            need_weights: also return each layer's attention probabilities.
            graph_token_only: skip the last layer's work on atoms, whose outputs reach nothing
                but the atom embeddings themselves; tokens are then ``[B, 1, D]``.

        Returns:
            The normalized tokens ``[B, 1 + N, D]`` (position 0 is the graph token) and, with
            ``need_weights``, each layer's attention probabilities ``[B, H, 1 + N, 1 + N]``.
        """
        b, n = batch.node_mask.shape
        atoms = self.atom_encoder(batch.x) + self.degree_encoder(batch.degree)
        grid = atoms.new_zeros(b * n, atoms.shape[1]).index_copy(0, batch.node_slot, atoms)
        x = torch.cat([self.graph_token.expand(b, 1, -1).to(atoms.dtype),
                       grid.view(b, n, -1)], dim=1)
        x = self.input_dropout(x)
        weights: list[Tensor] = []
        node_mask = batch.node_mask
        groups = group_bias = inverse = None
        if x.device.type == "cpu" and not need_weights:
            heads = len(self.attention_bias.virtual_distance)
            groups, inverse, x, node_mask = _sort_into_groups(x, node_mask, heads)
            if fused_attention.usable(x, x.shape[-1] // heads):
                groups = replace(groups, fused=True, rows=groups.token_rows(x.device))
            bias, group_bias = self._grouped_bias(batch, groups, node_mask, inverse, x.dtype)
            if groups.fused and self._norms_take_rows():
                return self._encode_packed(x, groups, group_bias, inverse, graph_token_only), []
        else:
            bias = self.attention_bias(batch).to(x.dtype)
        for index, layer in enumerate(self.layers):
            last = graph_token_only and index == len(self.layers) - 1
            x, w = layer(x, bias, node_mask, need_weights, graph_token_only=last, groups=groups,
                         group_bias=group_bias)
            if w is not None:
                weights.append(w)
        x = self.final_norm(x, node_mask[:, : x.shape[1] - 1])
        return (x if inverse is None else x.index_select(0, inverse)), weights

    def _encode_packed(self, x: Tensor, groups: SizeGroups, group_bias: list[Tensor],
                       inverse: Tensor | None, graph_token_only: bool) -> Tensor:
        """The layers on the packed size groups' tokens ``[T, D]`` (CPU, fused attention).

        Each graph keeps only its group's length ``L_g`` of the padded grid's ``L`` positions,
        so the norms, projections, FFN and dropouts run on ``T = sum B_g * L_g`` rows instead
        of ``B * L``: the price of uniform random batches, whose largest molecule sets ``L``,
        stays small. Same result as the padded grid up to float rounding (and dropout draws).
        """
        b, length, dim = x.shape
        rows = groups.rows if groups.rows is not None else torch.arange(b * length)
        tokens = x.reshape(b * length, dim).index_select(0, rows)
        graph_rows = (rows % length == 0).nonzero().squeeze(1)
        for index, layer in enumerate(self.layers):
            last = graph_token_only and index == len(self.layers) - 1
            tokens, graph_rows = layer.forward_packed(tokens, graph_rows, groups, group_bias,
                                                      graph_token_only=last)
        tokens = self.final_norm.normalize_rows(tokens, graph_rows)
        if graph_token_only:
            out = tokens.index_select(0, graph_rows)[:, None]
        else:
            out = tokens.new_zeros(b * length, dim).index_copy(0, rows, tokens)
            out = out.view(b, length, dim)
        return out if inverse is None else out.index_select(0, inverse)

    def _norms_take_rows(self) -> bool:
        """Whether every norm works on token rows (per-token LayerNorm for the atoms).

        Reads the norm sites only (43 us a forward; walking all modules took 160).
        """
        norms = [n for layer in self.layers for n in (layer.attn_norm, layer.ffn_norm)]
        return all(isinstance(m, ShareNorm)
                   or isinstance(m, SepNorm) and type(m.tok_norm) is nn.LayerNorm
                   for m in [*norms, self.final_norm])

    def _grouped_bias(self, batch: GraphormerBatch, groups: SizeGroups, node_mask: Tensor,
                      inverse: Tensor | None, dtype: torch.dtype) -> tuple[Tensor, list[Tensor]]:
        """The CPU path's biases: the graph token's query row and each group's bias.

        Built from the atom pairs' biases without the full ``[B, H, L, L]`` tensor (see
        :mod:`~graphormer_sepnorm.nn.group_bias`). The query row ``[B, H, 1, L]`` (sorted
        order) is all a last layer run for the graph token only reads of the full bias.
        """
        pair = self.attention_bias.pair_bias(batch).to(dtype)
        distance = self.attention_bias.virtual_distance.to(dtype)
        group_bias = group_biases(pair, distance, groups, node_mask, batch.pair_slot, inverse)
        keys = padded_keys(node_mask, dtype)
        return keys[:, None, None, :] + distance.view(1, -1, 1, 1), group_bias

    def embed(self, batch: GraphormerBatch) -> Tensor:
        """Graph-token embeddings after the final norm, ``[B, D]``."""
        return self.encode(batch, graph_token_only=True)[0][:, 0]

    def forward(self, batch: GraphormerBatch) -> Tensor:
        """Predictions (logits for classification), ``[B, num_tasks]``."""
        return self.head(self.embed(batch))


def _sort_into_groups(x: Tensor, node_mask: Tensor, num_heads: int
                      ) -> tuple[SizeGroups, Tensor | None, Tensor, Tensor]:
    """Plans attention groups (see :class:`SizeGroups`) and sorts the batch by size for them.

    On the CPU attention runs per group of similar-sized graphs; on a GPU the fused kernels make
    padding cheap and grouping would cost a host sync. Sorting the graphs once here makes each
    layer's groups plain slices instead of a gather in every layer and a scatter in its
    backward (about 1% of a ZINC training step, measured). Every statistic is
    permutation-invariant.

    Returns:
        The groups (the whole batch when one group is best), the permutation that restores
        batch order (``None`` when already sorted; ``inverse[graph]`` is a graph's sorted
        position), and ``x``, ``node_mask`` in group order.
    """
    groups = SizeGroups.plan(node_mask, num_heads)
    if groups is None:
        return SizeGroups.whole(*x.shape[:2]), None, x, node_mask
    if groups.order is None:
        return groups, None, x, node_mask
    order, inverse = groups.order, groups.inverse
    groups = replace(groups, order=None, inverse=None)
    return groups, inverse, x.index_select(0, order), node_mask[order]
