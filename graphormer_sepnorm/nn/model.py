"""Graphormer with SepNorm: the full model, usable as a plain ``nn.Module``."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from graphormer_sepnorm.data.batch import GraphormerBatch
from graphormer_sepnorm.nn.bias_encoders import AttentionBias
from graphormer_sepnorm.nn.config import NORM_SITES, GraphormerConfig, NormSite
from graphormer_sepnorm.nn.dropout import Dropout
from graphormer_sepnorm.nn.layer import GraphormerLayer
from graphormer_sepnorm.nn.node_encoders import AtomEncoder, DegreeEncoder
from graphormer_sepnorm.nn.precision import in_activation_dtype
from graphormer_sepnorm.nn.sepnorm import build_norm

__all__ = ["NORM_SITES", "FastEncode", "Graphormer"]

FastEncode = Callable[["Graphormer", GraphormerBatch, bool], "Tensor | None"]
"""Another :meth:`Graphormer.encode`, no weights: the tokens, or ``None`` (see :mod:`.backends`)."""


class Graphormer(nn.Module):
    """Graphormer (Ying et al., 2021), pre-LN, with SepNorm on the graph token.

    Atoms are embedded (features + degree), a learned graph token is put at position 0, the layers
    attend with a bias computed once per batch, and a head reads the graph token out:
    ``y = head(norm_final(x_L)[:, 0])`` with ``x_{l+1} = layer_l(x_l, bias)``. Layer 0's
    attention norm of the graph token is a LayerNorm even when ``cls_norm='batch'``: it is one
    learned vector for every graph, with no variance for a BatchNorm.

    Args:
        config: the hyperparameters (:class:`~graphormer_sepnorm.nn.config.GraphormerConfig`).

    Shapes:
        a :class:`~graphormer_sepnorm.data.batch.GraphormerBatch` (or
        :class:`~graphormer_sepnorm.data.batch.GridBatch`) of ``B`` graphs -> ``[B, num_tasks]``.

    Examples:
        >>> from torch_geometric.data import Data
        >>> from graphormer_sepnorm.data.collate import GraphormerCollator
        >>> ring = Data(x=torch.zeros(3, 1, dtype=torch.long),
        ...             edge_index=torch.tensor([[0, 1, 1, 2, 2, 0], [1, 0, 2, 1, 0, 2]]),
        ...             edge_attr=torch.zeros(6, 1, dtype=torch.long))
        >>> batch = GraphormerCollator()([ring, ring])
        >>> model = Graphormer(GraphormerConfig((28,), (4,), num_layers=2, hidden_dim=16))
        >>> model(batch).shape
        torch.Size([2, 1])
    """

    def __init__(self, config: GraphormerConfig) -> None:
        super().__init__()
        if not config.atom_feature_dims or not config.edge_feature_dims:
            raise ValueError("the config needs atom_feature_dims and edge_feature_dims")
        self.config = c = config
        self.backend = "reference"
        self.fast_encode: FastEncode | None = None
        self.atom_encoder = AtomEncoder(c.atom_feature_dims, c.hidden_dim)
        self.degree_encoder = DegreeEncoder(c.hidden_dim, c.max_degree)
        self.graph_token = nn.Parameter(torch.empty(c.hidden_dim))
        self.attention_bias = AttentionBias(c.num_heads, c.edge_feature_dims, c.max_distance,
                                            c.multi_hop_max_dist, c.edge_encoding)
        self.input_dropout = Dropout(c.dropout)
        self.layers = nn.ModuleList(
            GraphormerLayer(c.hidden_dim, c.ffn_dim, c.num_heads,
                            self._norm("attn", first=index == 0), self._norm("ffn"), c.dropout,
                            c.attention_dropout, c.activation_dropout)
            for index in range(c.num_layers)
        )
        self.final_norm = self._norm("final")
        self.head = _head(c.hidden_dim + c.mol_feature_dim, c.head_hidden_dim, c.num_tasks,
                          c.dropout)
        if c.extra_feature_dim:  # the table's own descriptors, standardized here
            self.register_buffer("feature_mean", torch.zeros(c.extra_feature_dim))
            self.register_buffer("feature_std", torch.ones(c.extra_feature_dim))
        self.reset_parameters()

    def _norm(self, site: NormSite, first: bool = False) -> nn.Module:
        c = self.config
        cls_norm = "layer" if first and c.cls_norm == "batch" else c.cls_norm
        return build_norm(c.hidden_dim, c.sepnorm and site in c.sepnorm_sites, cls_norm,
                          c.tok_norm, c.sync_batch_norm)

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

    def embed_tokens(self, batch: GraphormerBatch) -> Tensor:
        """The layers' input before dropout: graph token and atoms, ``[B, 1 + N, D]``."""
        atoms = self.atom_encoder(batch.x) + self.degree_encoder(batch.degree)
        grid = batch.atom_grid(atoms)
        return torch.cat([self.graph_token.expand(len(grid), 1, -1).to(atoms.dtype), grid],
                         dim=1)

    def encode(self, batch: GraphormerBatch, need_weights: bool = False,
               graph_token_only: bool = False) -> tuple[Tensor, list[Tensor]]:
        """Runs the encoder.

        Args:
            batch: the collated graphs.
            need_weights: also return each layer's attention probabilities.
            graph_token_only: skip the last layer's work on atoms; tokens are then
                ``[B, 1, D]``.

        Without ``need_weights`` a device wing's ``fast_encode`` may run it.

        Returns:
            The normalized tokens ``[B, 1 + N, D]`` (position 0 is the graph token) and, with
            ``need_weights``, each layer's attention probabilities ``[B, H, 1 + N, 1 + N]``.
        """
        if self.fast_encode is not None and not need_weights:
            tokens = self.fast_encode(self, batch, graph_token_only)
            if tokens is not None:
                return tokens, []
        x = in_activation_dtype(self.input_dropout(self.embed_tokens(batch)))
        bias = self.attention_bias(batch).to(x.dtype)
        node_mask, weights = batch.node_mask, []
        for index, layer in enumerate(self.layers):
            last = graph_token_only and index == len(self.layers) - 1
            x, w = layer(x, bias, node_mask, need_weights, graph_token_only=last)
            if w is not None:
                weights.append(w)
        return self.final_norm(x, node_mask[:, : x.shape[1] - 1]), weights

    def embed(self, batch: GraphormerBatch) -> Tensor:
        """Graph-token embeddings after the final norm, ``[B, D]``."""
        return self.encode(batch, graph_token_only=True)[0][:, 0]

    def readout(self, embedding: Tensor, batch: GraphormerBatch) -> Tensor:
        """The head on graph-token embeddings ``[B, D]`` (and ``batch.mol_x``): ``[B, T]``."""
        if self.config.mol_feature_dim:
            if batch.mol_x is None or batch.mol_x.shape[-1] != self.config.mol_feature_dim:
                found = None if batch.mol_x is None else batch.mol_x.shape[-1]
                raise ValueError(f"the head reads {self.config.mol_feature_dim} molecule "
                                 f"features, the batch has {found}: featurize with the "
                                 "model's featurizer config")
            embedding = torch.cat([embedding, self._mol_features(batch.mol_x).to(
                embedding.dtype)], dim=-1)
        return self.head(embedding)

    def _mol_features(self, mol_x: Tensor) -> Tensor:
        """``mol_x`` with its last ``extra_feature_dim`` columns standardized."""
        extra = self.config.extra_feature_dim
        if not extra:
            return mol_x
        own = (mol_x[..., -extra:] - self.feature_mean) / self.feature_std
        return torch.cat([mol_x[..., :-extra], own], dim=-1)

    @torch.no_grad()
    def set_feature_scaler(self, mean: list[float], std: list[float]) -> None:
        """Sets ``feature_mean`` and ``feature_std`` (a constant column's std counts as 1)."""
        std_ = torch.as_tensor(std, dtype=self.feature_std.dtype)
        self.feature_mean.copy_(torch.as_tensor(mean, dtype=self.feature_mean.dtype))
        self.feature_std.copy_(torch.where(std_ > 1e-8, std_, torch.ones_like(std_)))

    def forward(self, batch: GraphormerBatch) -> Tensor:
        """Predictions (logits for classification), ``[B, num_tasks]``."""
        return self.readout(self.embed(batch), batch)


def _head(width: int, hidden: int, outputs: int, dropout: float) -> nn.Module:
    """Graphormer's linear head (``hidden == 0``) or a one-hidden-layer MLP."""
    if not hidden:
        return nn.Linear(width, outputs)
    return nn.Sequential(Dropout(dropout), nn.Linear(width, hidden), nn.ReLU(),
                         Dropout(dropout), nn.Linear(hidden, outputs))
