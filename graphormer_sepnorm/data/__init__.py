"""Graph preprocessing (shortest paths) and collation into padded batches."""

from graphormer_sepnorm.data.collate import GraphormerBatch, GraphormerCollator
from graphormer_sepnorm.data.sampler import SizeGroupedBatchSampler
from graphormer_sepnorm.data.transform import AddShortestPaths, add_shortest_paths

__all__ = [
    "AddShortestPaths",
    "GraphormerBatch",
    "GraphormerCollator",
    "SizeGroupedBatchSampler",
    "add_shortest_paths",
]
