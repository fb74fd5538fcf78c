"""Training batches that resume mid-epoch exactly where a checkpoint left them.

An epoch's batches are a function of (seed, epoch), so the position Lightning saves through the
loader's ``state_dict`` is (epoch, batches done, from the trainer's progress), and a resumed fit
skips the batches it already trained on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any

from torch.utils.data import DataLoader, Sampler

__all__ = ["ResumableBatchSampler", "ResumableLoader", "batches_done"]


class ResumableBatchSampler(Sampler[list[int]]):
    """A batch sampler whose next epoch can start after its first ``skip`` batches.

    Args:
        batches: the batch sampler (lists of indices; an epoch set by ``set_epoch``).
    """

    def __init__(self, batches: Sampler[list[int]]) -> None:
        self.batches = batches
        self.epoch = 0
        self._resume: tuple[int, int] | None = None

    @property
    def sampler(self) -> ResumableBatchSampler:
        """This sampler, whose epoch Lightning sets as ``loader.batch_sampler.sampler``'s."""
        return self

    def set_epoch(self, epoch: int) -> None:
        """Sets this and the wrapped sampler's epoch."""
        self.epoch = epoch
        if hasattr(self.batches, "set_epoch"):
            self.batches.set_epoch(epoch)

    def resume_at(self, epoch: int, skip: int) -> None:
        """The next iteration, if it is of ``epoch``, leaves out its first ``skip`` batches."""
        self._resume = (int(epoch), int(skip))

    def __iter__(self) -> Iterator[list[int]]:
        batches: Iterator[list[int]] = iter(self.batches)
        if self._resume is not None:
            epoch, skip = self._resume
            self._resume = None
            if epoch == self.epoch:
                batches = islice(batches, skip, None)
        yield from batches

    def __len__(self) -> int:
        return len(self.batches)


def batches_done(trainer: Any) -> int:
    """Training batches of the current epoch that ``trainer`` has run (0 without a trainer)."""
    if trainer is None:
        return 0
    return int(trainer.fit_loop.epoch_loop.batch_progress.current.ready)


def position_state(samplers: list[ResumableBatchSampler],
                   done: Callable[[], int]) -> dict[str, int]:
    """The state Lightning saves: the samplers' epoch and the batches done in it."""
    return {"epoch": samplers[0].epoch, "batches_done": done()}


def resume_samplers(samplers: list[ResumableBatchSampler], state: dict[str, int]) -> None:
    """Makes the samplers' next epoch start where ``state`` (:func:`position_state`) left it."""
    if state:
        for sampler in samplers:
            sampler.resume_at(state["epoch"], state["batches_done"])


class ResumableLoader(DataLoader):
    """A ``DataLoader`` over a :class:`ResumableBatchSampler` that Lightning can checkpoint.

    torchdata's ``StatefulDataLoader`` costs the same (either within 15 us a batch of a plain
    ``DataLoader``, against 4 to 7 ms of collation; ``benchmarks/resumable_loader.py``) but
    would not serve the grid engine's batches, which are no ``DataLoader`` and resume through
    the same sampler: one mechanism and one saved state for both, no other dependency.

    Args:
        *args: ``DataLoader``'s; ``batch_sampler`` must be a :class:`ResumableBatchSampler`.
        done: returns the batches of the current epoch trained so far (see
            :func:`batches_done`).
        **kwargs: ``DataLoader``'s.
    """

    def __init__(self, *args: Any, done: Callable[[], int] = lambda: 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(self.batch_sampler, ResumableBatchSampler):
            raise TypeError("ResumableLoader needs a ResumableBatchSampler as batch_sampler")
        self._done = done

    def state_dict(self) -> dict[str, int]:
        """The epoch and the batches of it done (what a resumed fit skips)."""
        return position_state([self.batch_sampler], self._done)

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        """Makes the next epoch, if it is the saved one, start after its done batches."""
        resume_samplers([self.batch_sampler], state_dict)
