"""Graphormer for molecular property prediction, with SepNorm on the graph token."""

from graphormer_sepnorm.data import (
    AddShortestPaths,
    GraphormerBatch,
    GraphormerCollator,
    add_shortest_paths,
)
from graphormer_sepnorm.nn import Graphormer, GraphormerConfig, SepNorm, ShareNorm, set_backend

__version__ = "0.1.0"

__all__ = [
    "AddShortestPaths",
    "Graphormer",
    "GraphormerBatch",
    "GraphormerCollator",
    "GraphormerConfig",
    "SepNorm",
    "ShareNorm",
    "add_shortest_paths",
    "set_backend",
]
