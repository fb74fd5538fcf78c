"""Graph preprocessing (shortest paths) and collation into padded batches."""

from graphormer_sepnorm.data.batch import GraphormerBatch, GridBatch
from graphormer_sepnorm.data.collate import GraphormerCollator
from graphormer_sepnorm.data.sampler import SizeGroupedBatchSampler
from graphormer_sepnorm.data.shortest_paths import AddShortestPaths, add_shortest_paths

__all__ = [
    "AddShortestPaths",
    "GraphormerBatch",
    "GraphormerCollator",
    "GridBatch",
    "SizeGroupedBatchSampler",
    "add_shortest_paths",
]
