"""Batches of graphs of similar size, so that padding wastes little compute."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler


class SizeGroupedBatchSampler(Sampler[list[int]]):
    """Yields batches of indices whose graphs have similar node counts.

    Indices are shuffled, cut into pools of ``batch_size * pool_batches``, each pool is sorted by
    size and cut into batches, and the batches are shuffled. Attention and every token-wise layer
    run on ``[B, N_max]``, so mixing a 10-atom and a 60-atom molecule in one batch costs up to 6x
    the work; pools keep batches random yet nearly uniform in size.

    Args:
        sizes: node count of each graph.
        batch_size: graphs per batch.
        shuffle: shuffle within and across pools (training); when false, batches follow the
            dataset order exactly (evaluation). Default: true.
        drop_last: drop a last incomplete batch. Default: false.
        pool_batches: batches per sorted pool; larger groups sizes better, smaller keeps more
            randomness. Default: 50.
        seed: base seed; epoch ``e`` uses ``seed + e`` (call :meth:`set_epoch`). Default: 0.
    """

    def __init__(self, sizes: Sequence[int], batch_size: int, shuffle: bool = True,
                 drop_last: bool = False, pool_batches: int = 50, seed: int = 0) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be positive")
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
