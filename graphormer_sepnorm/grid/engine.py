"""The grid engine as a datamodule's plug-in: splits kept on the device, grid batches per step."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import Sampler
from torch_geometric.data import Data

from graphormer_sepnorm.data.batch import GridBatch
from graphormer_sepnorm.data.resumable import ResumableBatchSampler, position_state, resume_samplers
from graphormer_sepnorm.grid.store import GridGraphs

TrainLength = Literal["bucketed", "longest"]


class _EpochSetter(list):
    """The replicas' batch samplers; Lightning finds this as ``.sampler`` and sets the epoch."""

    def set_epoch(self, epoch: int) -> None:
        for sampler in self:
            sampler.set_epoch(epoch)


class DeviceBatches:
    """Grid batches of a :class:`~graphormer_sepnorm.grid.store.GridGraphs`, one per step.

    An epoch's graph indices go to the device in one copy and each step's batch is gathered
    there, padded to a length read from host sizes; with several replicas a step's batches are
    stacked ``[R, B]``. Lightning takes it as a dataloader.

    Args:
        store: the split's graphs on the device.
        samplers: one batch sampler per replica (lists of graph indices); with several, their
            batches must have equal sizes (``drop_last``).
        length_multiple: padded lengths are multiples of it. Default: 8.
        stack: batches ``[R, B]``, one row per sampler, also for ``R = 1``. Default: false.
        length: pad every batch to this many atoms (at least the store's largest molecule);
            ``None`` (default): each batch's bucketed length (:meth:`GridGraphs.length_for
            <graphormer_sepnorm.grid.store.GridGraphs.length_for>`).
        done: the batches of the current epoch trained so far
            (:func:`~graphormer_sepnorm.data.resumable.batches_done`), saved with resumable
            samplers for a mid-epoch resumption.
    """

    def __init__(self, store: GridGraphs, samplers: Sequence[Sampler[list[int]]],
                 length_multiple: int = 8, stack: bool = False,
                 done: Callable[[], int] = lambda: 0, length: int | None = None) -> None:
        if not samplers or len(samplers) > 1 and not stack:
            raise ValueError("one batch sampler, or several with stack=True")
        if length is not None and length < (largest := int(store.sizes.max(initial=1))):
            raise ValueError(f"length {length} is shorter than the largest molecule ({largest})")
        self.length = length
        self.store = store
        self.sampler = _EpochSetter(samplers)
        self.batch_sampler = None  # Lightning inspects a dataloader's pair of them
        self.length_multiple = length_multiple
        self.stack = stack
        self._done = done

    def __len__(self) -> int:
        return min(len(s) for s in self.sampler)

    def _resumable(self) -> list[ResumableBatchSampler]:
        return [s for s in self.sampler if isinstance(s, ResumableBatchSampler)]

    def state_dict(self) -> dict[str, int]:
        """The epoch and its batches done, with resumable samplers (else nothing)."""
        samplers = self._resumable()
        return position_state(samplers, self._done) if samplers else {}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        """The next epoch, if it is the saved one, starts after its done batches."""
        resume_samplers(self._resumable(), state_dict)

    def _epoch(self) -> list[np.ndarray]:
        """This epoch's batches as host arrays ``[R, B]`` (``[B]`` unless ``stack``)."""
        per_replica = [list(s) for s in self.sampler]
        steps = min(len(b) for b in per_replica)
        batches = []
        for step in range(steps):
            members = [b[step] for b in per_replica]
            if len({len(m) for m in members}) > 1:
                raise ValueError("packed replicas need batches of one size; drop the last, "
                                 "incomplete batch of an epoch")
            batch = np.asarray(members, dtype=np.int64)
            batches.append(batch if self.stack else batch[0])
        return batches

    def __iter__(self) -> Iterator[GridBatch]:
        batches = self._epoch()
        if not batches:
            return
        # one host-to-device copy an epoch; each step slices a view of it
        host = torch.from_numpy(np.concatenate([b.reshape(-1) for b in batches]))
        if self.store.device.type == "cuda":
            host = host.pin_memory()
        on_device = host.to(self.store.device, non_blocking=True)
        for batch, index in zip(batches, on_device.split([b.size for b in batches]),
                                strict=True):
            length = self.length or self.store.length_for(batch.reshape(-1),
                                                          self.length_multiple)
            yield self.store.batch(index.view(batch.shape), length)


class GridEngine:
    """Serves a datamodule's splits as :class:`~graphormer_sepnorm.data.batch.GridBatch` es.

    Each split is kept on the training device (:class:`~graphormer_sepnorm.grid.store.GridGraphs`)
    and served as :class:`DeviceBatches`; the last incomplete training batch of an epoch is
    dropped. Given to a datamodule as ``engine`` (``configs/presets/gpu_fast.yaml``).

    Args:
        train_length: the padded length of training batches: ``'bucketed'`` (default), one of
            a handful of lengths; ``'longest'``, the split's largest, one shape, so that a
            compiled training step compiles once. Other batches are bucketed.
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
            stack: batches ``[R, B]``, one per sampler.
            pad: training batches, padded as ``train_length`` says.
            done: as :class:`DeviceBatches` takes it.
        """
        if split not in self._stores:
            self._stores[split] = GridGraphs(graphs, multi_hop_max_dist, device or "cpu")
        store = self._stores[split]
        longest = pad and self.train_length == "longest"
        length = int(store.lengths(self.length_multiple)[-1]) if longest else None
        return DeviceBatches(store, samplers, self.length_multiple, stack=stack, done=done,
                             length=length)
