"""The grid engine: splits kept on the training device, static-shape batches gathered there."""

from graphormer_sepnorm.data.batch import GridBatch
from graphormer_sepnorm.grid.engine import DeviceBatches, GridEngine
from graphormer_sepnorm.grid.store import GridGraphs

__all__ = ["DeviceBatches", "GridBatch", "GridEngine", "GridGraphs"]
