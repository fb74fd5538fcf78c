"""Training and evaluation batch samplers: uniform random batches, or size-grouped ones."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler


class SizeGroupedBatchSampler(Sampler[list[int]]):
    """Batches of graph indices: uniform random by default, or grouped by molecule size.

    Indices are shuffled, cut into pools of ``batch_size * pool_batches``, each pool sorted by
    size and cut into batches, and the batches shuffled. With one batch per pool (the default)
    every batch is a uniform random sample, listed in size order. Size-grouped batches
    (``pool_batches > 1``) waste less padding but **bias every statistic over a batch** (a
    BatchNorm would subtract what size explains): for evaluation, or models without BatchNorm.

    Args:
        sizes: node count of each graph.
        batch_size: graphs per batch.
        shuffle: shuffle (training); when false, batches follow the dataset order exactly.
            Default: true.
        drop_last: drop a last incomplete batch. Default: false.
        pool_batches: batches per size-sorted pool; 1 gives uniform random batches. Default: 1.
        seed: base seed; epoch ``e`` uses ``seed + e`` (call :meth:`set_epoch`). Default: 0.
    """

    def __init__(self, sizes: Sequence[int], batch_size: int, shuffle: bool = True,
                 drop_last: bool = False, pool_batches: int = 1, seed: int = 0) -> None:
        if batch_size < 1 or pool_batches < 1:
            raise ValueError("batch_size and pool_batches must be positive")
        self.sizes = torch.as_tensor(list(sizes))
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.pool_batches = pool_batches
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch, so that each epoch draws different batches."""
        self.epoch = epoch

    def _batches(self) -> list[list[int]]:
        n = len(self.sizes)
        if not self.shuffle:
            order = torch.arange(n)
            return [order[i:i + self.batch_size].tolist() for i in range(0, n, self.batch_size)]
        gen = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(n, generator=gen)
        pool = self.batch_size * self.pool_batches
        batches = []
        for start in range(0, n, pool):
            # sorted within a batch too: the model's attention size groups are then slices
            members = order[start:start + pool]
            members = members[torch.argsort(self.sizes[members], stable=True)]
            batches += [members[i:i + self.batch_size].tolist()
                        for i in range(0, len(members), self.batch_size)]
        return [batches[i] for i in torch.randperm(len(batches), generator=gen).tolist()]

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self._batches():
            if self.drop_last and len(batch) < self.batch_size:
                continue
            yield batch

    def __len__(self) -> int:
        if self.drop_last and self.shuffle:
            return sum(len(b) == self.batch_size for b in self._batches())
        full, rest = divmod(len(self.sizes), self.batch_size)
        return full + (rest > 0 and not self.drop_last)
