"""An epoch of batches gathered on the device: the engine's replacement for a DataLoader."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import Sampler

from graphormer_sepnorm.data.batch import GridBatch
from graphormer_sepnorm.data.resumable import (
    ResumableBatchSampler,
    position_state,
    resume_samplers,
)
from graphormer_sepnorm.grid.store import GridGraphs


class _EpochSetter(list):
    """The replicas' batch samplers; Lightning finds this as ``.sampler`` and sets the epoch."""

    def set_epoch(self, epoch: int) -> None:
        for sampler in self:
            sampler.set_epoch(epoch)


class DeviceBatches:
    """Grid batches of a :class:`~graphormer_sepnorm.grid.store.GridGraphs`, one per step.

    The batch samplers (one per packed replica; each its own seed, so its own data order) are
    drawn on the host at the start of an epoch; their graph indices go to the device in one copy
    and each step's batch is gathered there (:meth:`GridGraphs.batch
    <graphormer_sepnorm.grid.store.GridGraphs.batch>`), padded to the batch's largest molecule
    rounded up to ``length_multiple``, a length read from host sizes. With several replicas a
    step's batches are stacked ``[R, B]`` and share one length. Lightning takes it as a
    dataloader (it has ``__len__`` and a ``sampler`` whose epoch it sets).

    Args:
        store: the split's graphs on the device.
        samplers: one batch sampler per replica (lists of graph indices); with several, their
            batches must have equal sizes (full batches: ``drop_last``).
        length_multiple: padded lengths are multiples of it, so few shapes occur. Default: 8.
        stack: batches ``[R, B]``, one row per sampler (packed replicas' training batches),
            also for ``R = 1``. Default: false (one sampler, batches ``[B]``).
        length: pad every batch to this many atoms (at least the store's largest molecule),
            one shape for all; ``None`` (default): each batch's own length, as above.
        done: the batches of the current epoch trained so far
            (:func:`~graphormer_sepnorm.data.resumable.batches_done`): with
            :class:`~graphormer_sepnorm.data.resumable.ResumableBatchSampler` samplers, Lightning
            saves the position in checkpoints and a resumed fit continues mid-epoch exactly.
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
