"""The model's hyperparameters, in one dataclass."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

EdgeEncoding = Literal["multi_hop", "simple"]
NormKind = Literal["batch", "layer", "none"]
NormSite = Literal["attn", "ffn", "final"]
NORM_SITES: tuple[NormSite, ...] = ("attn", "ffn", "final")


@dataclass(frozen=True)
class GraphormerConfig:
    """Every hyperparameter of :class:`~graphormer_sepnorm.nn.model.Graphormer`.

    The defaults are Graphormer-slim (Ying et al., 2021), about 0.5 M parameters. The data's
    sizes are usually filled in from the datamodule by the Lightning module.

    Attributes:
        atom_feature_dims: values per atom-feature column (ZINC: ``(28,)``; OGB: 9 columns).
        edge_feature_dims: values per bond-feature column (ZINC: ``(4,)``; OGB: 3 columns).
        num_tasks: outputs of the head. Default: 1.
        num_layers: Default: 12.
        hidden_dim: ``D``. Default: 80.
        ffn_dim: hidden size of the feed-forward block. Default: 80.
        num_heads: ``H``, must divide ``D``. Default: 8.
        dropout: on embeddings and block outputs. Default: 0.1.
        attention_dropout: on attention probabilities. Default: 0.1.
        activation_dropout: after the FFN's GELU. Default: 0.1.
        max_degree: degrees above it share its embedding. Default: 64.
        max_distance: largest shortest-path distance with its own spatial bucket. Default: 64.
        multi_hop_max_dist: ``K``, hops of each shortest path the edge encoder reads.
            Default: 20.
        edge_encoding: ``'multi_hop'`` (default) or ``'simple'`` (bonded pairs only).
        sepnorm: SepNorm (true, default) or ShareNorm (one LayerNorm for every token).
        cls_norm: SepNorm's norm of the graph token. Default: ``'batch'``.
        tok_norm: SepNorm's norm of the atoms. Default: ``'layer'``.
        sepnorm_sites: where SepNorm replaces ShareNorm: ``'attn'`` (before attention),
            ``'ffn'`` (before the feed-forward block), ``'final'``. Default: all three.
        sync_batch_norm: under DDP, the graph token's BatchNorm uses the global batch's
            statistics (as ``SyncBatchNorm``). Default: true.
        mol_feature_dim: length of the molecule features (``batch.mol_x``) the head reads
            beside the graph token, usually filled in from the featurizer. Default: 0 (none).
        head_hidden_dim: 0 for Graphormer's linear head (default); else the width of a
            one-hidden-layer MLP head (dropout, linear, ReLU, dropout, linear).
        extra_feature_dim: the last columns of the molecule features that come from the
            user's table as they are (``feature_columns``); the model standardizes them with
            its ``feature_mean`` and ``feature_std`` buffers, set from the training split.
            Default: 0.
    """

    atom_feature_dims: tuple[int, ...] = ()
    edge_feature_dims: tuple[int, ...] = ()
    num_tasks: int = 1
    num_layers: int = 12
    hidden_dim: int = 80
    ffn_dim: int = 80
    num_heads: int = 8
    dropout: float = 0.1
    attention_dropout: float = 0.1
    activation_dropout: float = 0.1
    max_degree: int = 64
    max_distance: int = 64
    multi_hop_max_dist: int = 20
    edge_encoding: EdgeEncoding = "multi_hop"
    sepnorm: bool = True
    cls_norm: NormKind = "batch"
    tok_norm: NormKind = "layer"
    sepnorm_sites: tuple[NormSite, ...] = NORM_SITES
    sync_batch_norm: bool = True
    mol_feature_dim: int = 0
    head_hidden_dim: int = 0
    extra_feature_dim: int = 0

    def __post_init__(self) -> None:
        for name in ("atom_feature_dims", "edge_feature_dims", "sepnorm_sites"):
            object.__setattr__(self, name, tuple(getattr(self, name)))  # lists from YAML
        unknown = set(self.sepnorm_sites) - set(NORM_SITES)
        if unknown:
            raise ValueError(f"unknown sepnorm sites {sorted(unknown)}; use {NORM_SITES}")
        if self.hidden_dim % self.num_heads:
            raise ValueError(f"hidden_dim {self.hidden_dim} is not divisible by "
                             f"{self.num_heads} heads")
        if self.mol_feature_dim < 0 or self.head_hidden_dim < 0:
            raise ValueError("mol_feature_dim and head_hidden_dim must be at least 0")
        if not 0 <= self.extra_feature_dim <= self.mol_feature_dim:
            raise ValueError("extra_feature_dim must be in [0, mol_feature_dim]")
        if self.edge_encoding not in ("multi_hop", "simple"):
            raise ValueError(f"unknown edge encoding {self.edge_encoding!r}")

    def to_dict(self) -> dict[str, Any]:
        """Plain values (lists, not tuples), for checkpoints and YAML."""
        return {key: list(value) if isinstance(value, tuple) else value
                for key, value in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> GraphormerConfig:
        """The inverse of :meth:`to_dict`; unknown keys raise ``TypeError``."""
        return cls(**values)

    def replace(self, **changes: Any) -> GraphormerConfig:
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)
