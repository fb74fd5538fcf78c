"""The grid engine: splits kept on the training device, static-shape batches gathered there.

What makes a compiled GPU step fast, and what packed replicas train on: a datamodule given a
:class:`GridEngine` serves :class:`GridBatch` es (every position and pair of the padded grid)
instead of the collator's batches, which the reference model reads through the same layout
methods.
"""

from graphormer_sepnorm.data.batch import GridBatch
from graphormer_sepnorm.grid.batches import DeviceBatches
from graphormer_sepnorm.grid.engine import GridEngine
from graphormer_sepnorm.grid.store import GridGraphs

__all__ = ["DeviceBatches", "GridBatch", "GridEngine", "GridGraphs"]
