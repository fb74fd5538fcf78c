"""Encoders of atoms: their features (summed embeddings) and their degree (centrality)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class FeatureEmbedding(nn.Module):
    """One embedding table per integer feature column, combined per row.

    Column ``f`` takes values ``0 .. feature_dims[f] - 1``; one table with per-column offsets,
    reduced by ``embedding_bag`` (by gathers with ``gather_sums``, for ``vmap``, or compiled).

    Args:
        feature_dims: number of values of each column, e.g. ``[28]`` for ZINC atom types or
            ogb's ``get_atom_feature_dims()`` (9 columns).
        dim: output size ``D``.
        mode: ``'sum'`` (Graphormer's atom encoder) or ``'mean'`` (its edge encoder).

    Shapes:
        input ``[T, F]`` long -> output ``[T, D]``.

    Examples:
        >>> embed = FeatureEmbedding([5, 3], dim=8)  # two columns: 5 and 3 values
        >>> embed(torch.tensor([[4, 0], [1, 2]])).shape
        torch.Size([2, 8])
    """

    def __init__(self, feature_dims: Sequence[int], dim: int, mode: str = "sum") -> None:
        super().__init__()
        dims = torch.tensor(list(feature_dims), dtype=torch.long)
        if len(dims) == 0 or bool((dims < 1).any()):
            raise ValueError(f"feature_dims must be positive, got {list(feature_dims)}")
        self.register_buffer("offsets", torch.cumsum(dims, 0) - dims, persistent=False)
        self.register_buffer("dims", dims, persistent=False)
        self.mode = mode
        self.gather_sums = False
        self.weight = nn.Parameter(torch.empty(int(dims.sum()), dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Normal(0, 0.02) initialization, as in Graphormer."""
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, features: Tensor) -> Tensor:
        """Embeds ``features`` (``[T, F]`` long) into ``[T, D]``."""
        if features.shape[-1] != len(self.offsets):
            raise ValueError(
                f"expected {len(self.offsets)} feature columns, got {features.shape[-1]}"
            )
        if self.gather_sums or torch.compiler.is_compiling():
            rows = F.embedding(features + self.offsets, self.weight)  # [T, F, D]
            return rows.sum(-2) if self.mode == "sum" else rows.mean(-2)
        return F.embedding_bag(features + self.offsets, self.weight, mode=self.mode)


class AtomEncoder(FeatureEmbedding):
    """Sum of per-column atom-feature embeddings, ``[T, F] -> [T, D]``."""

    def __init__(self, feature_dims: Sequence[int], dim: int) -> None:
        super().__init__(feature_dims, dim, mode="sum")


class DegreeEncoder(nn.Module):
    """Graphormer's centrality encoding: a learned embedding per node degree.

    Args:
        dim: output size ``D``.
        max_degree: degrees above it share its embedding. Default: 64.

    Shapes:
        ``degree`` ``[T]`` long -> ``[T, D]``.

    Examples:
        >>> encoder = DegreeEncoder(dim=8, max_degree=4)
        >>> torch.equal(encoder(torch.tensor([4])), encoder(torch.tensor([9])))  # capped
        True
    """

    def __init__(self, dim: int, max_degree: int = 64) -> None:
        super().__init__()
        self.max_degree = max_degree
        self.embedding = nn.Embedding(max_degree + 1, dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Normal(0, 0.02) initialization, as in Graphormer."""
        nn.init.normal_(self.embedding.weight, std=0.02)

    def forward(self, degree: Tensor) -> Tensor:
        """Embeds node degrees."""
        return self.embedding(degree.clamp(max=self.max_degree))
