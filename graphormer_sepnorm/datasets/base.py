"""Shared datamodule logic: cached shortest paths, size-grouped batches, DDP sharding."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, Dataset, Sampler
from torch_geometric.data import Data

from graphormer_sepnorm.data import GraphormerCollator, SizeGroupedBatchSampler, add_shortest_paths

SPLITS = ("train", "val", "test")


def make_dataset_info(name: str, task: str, target_names: Sequence[str],
                      featurizer: Any) -> dict[str, Any]:
    """The ``dataset_info`` a model is built from: task, targets, the featurizer and its dims.

    Args:
        name: the dataset's name.
        task: ``'regression'`` or ``'binary'``.
        target_names: one name per output.
        featurizer: a :class:`~graphormer_sepnorm.featurizers.Featurizer`.
    """
    return {"name": name, "task": task, "target_names": list(target_names),
            "atom_feature_dims": list(featurizer.atom_feature_dims),
            "edge_feature_dims": list(featurizer.edge_feature_dims),
            "featurizer": featurizer.to_config()}


class GraphList(Dataset):
    """A list of preprocessed graphs as a map-style dataset (indexing returns the object)."""

    def __init__(self, graphs: Sequence[Data]) -> None:
        self.graphs = list(graphs)

    def __len__(self) -> int:
        return len(self.graphs)

    def __getitem__(self, index: int) -> Data:
        return self.graphs[index]


def split_to_count(batches: list[list[int]], count: int) -> list[list[int]]:
    """The batches, the largest ones halved until there are at least ``count``.

    Graph order is kept. Under DDP an evaluation set with fewer batches than processes would
    leave a process with none, and its metrics with nothing to synchronize.

    Raises:
        ValueError: fewer graphs than ``count``: some process would get none.
    """
    batches = [list(b) for b in batches]
    while batches and len(batches) < count:
        largest = max(range(len(batches)), key=lambda k: len(batches[k]))
        if len(batches[largest]) < 2:
            raise ValueError(f"{sum(map(len, batches))} graphs cannot give each of {count} "
                             "processes at least one; use fewer devices for this split")
        half = len(batches[largest]) // 2
        batches[largest:largest + 1] = [batches[largest][:half], batches[largest][half:]]
    return batches


class ShardedBatches(Sampler[list[int]]):
    """Every ``world_size``-th batch of a batch sampler, for one DDP process.

    Training needs the same number of steps on every process (DDP all-reduces gradients each
    step), so ``even=True`` drops the last ``len % world_size`` batches of each epoch.
    Evaluation keeps every batch (``even=False``): no graph is seen twice, so metrics are exact;
    the module's metrics synchronize once per epoch and tolerate uneven counts. With fewer
    evaluation batches than processes the largest are split (:func:`split_to_count`), so that
    every process has at least one.
    """

    def __init__(self, batches: SizeGroupedBatchSampler, rank: int, world_size: int,
                 even: bool) -> None:
        self.batches, self.rank, self.world_size, self.even = batches, rank, world_size, even

    def set_epoch(self, epoch: int) -> None:
        """Forwards the epoch to the underlying sampler (Lightning calls it each epoch)."""
        self.batches.set_epoch(epoch)

    def __iter__(self) -> Iterator[list[int]]:
        all_batches = list(self.batches)
        if self.even:
            all_batches = all_batches[: len(all_batches) - len(all_batches) % self.world_size]
        else:
            all_batches = split_to_count(all_batches, self.world_size)
        return iter(all_batches[self.rank::self.world_size])

    def __len__(self) -> int:
        total = len(self.batches)
        if self.even:
            return total // self.world_size
        total = max(total, self.world_size) if total else 0
        return len(range(self.rank, total, self.world_size))


class GraphDataModule(LightningDataModule):
    """Base of the datamodules: loads splits once, adds shortest paths, serves batches.

    Subclasses implement :meth:`load_splits` and :attr:`dataset_info`. Shortest paths are
    computed once per process for all graphs (grouped by size, vectorized: about 50 us per ZINC
    molecule) and kept in memory; edge paths and degrees are derived per batch by
    :class:`~graphormer_sepnorm.data.collate.GraphormerCollator`, which measured cheaper than
    caching them. Training batches group molecules of similar size
    (:class:`~graphormer_sepnorm.data.sampler.SizeGroupedBatchSampler`); under DDP each process
    takes its own share of the batches (set ``trainer.use_distributed_sampler=False``; the CLI
    does).

    Args:
        root: data root; each dataset lives in its own folder below it. Default: ``'data'``.
        batch_size: graphs per training batch (per process under DDP). Default: 256.
        eval_batch_size: graphs per evaluation batch; ``None`` for ``batch_size``.
        num_workers: DataLoader worker processes. Default: 0.
        multi_hop_max_dist: hops of each shortest path the collator keeps; the CLI links it to
            the model's. Default: 20.
        seed: seed of the training batch order (epoch ``e`` uses ``seed + e``). Default: 0.
    """

    def __init__(self, root: str = "data", batch_size: int = 256,
                 eval_batch_size: int | None = None, num_workers: int = 0,
                 multi_hop_max_dist: int = 20, seed: int = 0) -> None:
        super().__init__()
        self.root = root
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.num_workers = num_workers
        self.multi_hop_max_dist = multi_hop_max_dist
        self.seed = seed
        self.splits: dict[str, list[Data]] | None = None

    @property
    def dataset_info(self) -> dict[str, Any]:
        """Task, target names, feature dims and featurizer (plain values, for the model)."""
        raise NotImplementedError

    def load_splits(self) -> dict[str, list[Data]]:
        """Returns the graphs of ``'train'``, ``'val'`` and ``'test'`` (with ``y``)."""
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        """Loads every split once and adds shortest paths."""
        if self.splits is not None:
            return
        splits = self.load_splits()
        self.splits = {name: add_shortest_paths(graphs) for name, graphs in splits.items()}

    def target_statistics(self) -> tuple[list[float], list[float]]:
        """Mean and standard deviation of each target over the training split."""
        self.setup("fit")
        y = torch.cat([g.y.reshape(1, -1).float() for g in self.splits["train"]])
        return y.mean(0).tolist(), y.std(0).tolist()

    def _loader(self, split: str, train: bool) -> DataLoader:
        assert self.splits is not None, "call setup() first"
        graphs = self.splits[split]
        sizes = [g.num_nodes for g in graphs]
        batch_size = self.batch_size if train else self.eval_batch_size
        # Evaluation batches come from one pool sorted by size (order never changes a metric);
        # training pools of 50 batches keep the batches random.
        pool = 50 if train else max(1, len(sizes))
        batches = SizeGroupedBatchSampler(sizes, batch_size, seed=self.seed, pool_batches=pool)
        world = self.trainer.world_size if self.trainer is not None else 1
        rank = self.trainer.global_rank if self.trainer is not None else 0
        sampler = ShardedBatches(batches, rank, world, even=train) if world > 1 else batches
        return DataLoader(GraphList(graphs), batch_sampler=sampler, num_workers=self.num_workers,
                          collate_fn=GraphormerCollator(self.multi_hop_max_dist),
                          persistent_workers=self.num_workers > 0)

    def train_dataloader(self) -> DataLoader:
        """Shuffled, size-grouped training batches."""
        return self._loader("train", train=True)

    def val_dataloader(self) -> DataLoader:
        """Validation batches (each graph once)."""
        return self._loader("val", train=False)

    def test_dataloader(self) -> DataLoader:
        """Test batches (each graph once)."""
        return self._loader("test", train=False)

    def predict_dataloader(self) -> DataLoader:
        """The test split in its own order (predictions line up with the dataset)."""
        assert self.splits is not None, "call setup() first"
        return DataLoader(GraphList(self.splits["test"]), batch_size=self.eval_batch_size,
                          collate_fn=GraphormerCollator(self.multi_hop_max_dist),
                          num_workers=self.num_workers)
