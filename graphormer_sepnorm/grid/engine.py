"""The grid engine as a datamodule's plug-in: splits kept on the device, grid batches per step."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch
from torch.utils.data import Sampler
from torch_geometric.data import Data

from graphormer_sepnorm.grid.batches import DeviceBatches
from graphormer_sepnorm.grid.store import GridGraphs

TrainLength = Literal["bucketed", "longest"]


class GridEngine:
    """Serves a datamodule's splits as :class:`~graphormer_sepnorm.data.batch.GridBatch` es.

    Each split is walked once and kept on the training device
    (:class:`~graphormer_sepnorm.grid.store.GridGraphs`); a step's batch is an index gather
    there, with shapes that depend on the batch size and padded length only
    (:class:`~graphormer_sepnorm.grid.batches.DeviceBatches`), so a compiled step compiles
    once per shape. The last incomplete training batch of an epoch is dropped. Packed replicas
    (a module with ``seeds``) train on it, each replica on batches drawn with its own seed.
    Given to a datamodule as ``engine`` (``configs/presets/gpu_fast.yaml``).

    Args:
        train_length: the padded length of training batches. ``'bucketed'`` (default): the
            batch's largest molecule rounded up to one of a handful of lengths
            (:meth:`GridGraphs.lengths <graphormer_sepnorm.grid.store.GridGraphs.lengths>`).
            ``'longest'``: every batch padded to the split's largest (rounded up), one shape,
            so that a compiled training step compiles once. Evaluation and statistics batches
            keep the bucketed lengths: they run eagerly.
        length_multiple: padded lengths are multiples of it. Default: 8.
    """

    def __init__(self, train_length: TrainLength = "bucketed", length_multiple: int = 8) -> None:
        if train_length not in ("bucketed", "longest"):
            raise ValueError(f"train_length must be 'bucketed' or 'longest', not "
                             f"{train_length!r}")
        self.train_length = train_length
        self.length_multiple = length_multiple
        self._stores: dict[str, GridGraphs] = {}

    def config(self) -> dict[str, Any]:
        """This engine as plain values, as ``--data.init_args.engine`` takes it."""
        return {"class_path": f"{type(self).__module__}.{type(self).__name__}",
                "init_args": {"train_length": self.train_length,
                              "length_multiple": self.length_multiple}}

    def batches(self, split: str, graphs: Sequence[Data], samplers: Sequence[Sampler[list[int]]],
                multi_hop_max_dist: int, device: torch.device | None = None,
                stack: bool = False, pad: bool = False,
                done: Callable[[], int] = lambda: 0) -> DeviceBatches:
        """An epoch's grid batches of ``split``, its graphs stored on ``device`` at first use.

        Args:
            split: the split's name, which its store is kept under.
            graphs: the split's graphs (with shortest paths).
            samplers: one batch sampler per replica (one unless ``stack``).
            multi_hop_max_dist: hops of each shortest path kept.
            device: where the store lives. Default: the CPU.
            stack: batches ``[R, B]``, one per sampler (packed replicas' training batches).
            pad: training batches, padded as ``train_length`` says.
            done: the batches of the current epoch trained so far (mid-epoch resumption).
        """
        if split not in self._stores:
            self._stores[split] = GridGraphs(graphs, multi_hop_max_dist, device or "cpu")
        store = self._stores[split]
        longest = pad and self.train_length == "longest"
        length = int(store.lengths(self.length_multiple)[-1]) if longest else None
        return DeviceBatches(store, samplers, self.length_multiple, stack=stack, done=done,
                             length=length)
