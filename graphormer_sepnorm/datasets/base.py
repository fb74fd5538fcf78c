"""Shared datamodule logic: cached shortest paths, random training batches, DDP sharding."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any, Literal

import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, Dataset, Sampler
from torch_geometric.data import Data

from graphormer_sepnorm.data import GraphormerCollator, SizeGroupedBatchSampler, add_shortest_paths
from graphormer_sepnorm.data.resumable import ResumableBatchSampler, ResumableLoader, batches_done
from graphormer_sepnorm.grid import DeviceBatches, GridEngine

SPLITS = ("train", "val", "test")
TrainBatches = Literal["random", "size_grouped"]
#: Batches per size-sorted pool when training batches are size-grouped (an opt-in).
SIZE_GROUPED_POOL = 50


class DataError(ValueError):
    """A problem with the user's data (a file, column or row), reported without a traceback."""


def make_dataset_info(name: str, task: str, target_names: Sequence[str], featurizer: Any,
                      num_classes: int | None = None,
                      feature_columns: Sequence[str] = ()) -> dict[str, Any]:
    """The ``dataset_info`` a model is built from: task, targets, the featurizer and its dims.

    ``mol_feature_dim`` (the featurizer's molecule features, then the descriptor columns) is
    there only when it is not 0; ``num_classes`` only for multiclass tasks, ``feature_columns``
    only when given.

    Args:
        name: the dataset's name.
        task: ``'regression'``, ``'binary'`` or ``'multiclass'``.
        target_names: one name per label column.
        featurizer: a featurizer (``graphormer_sepnorm.chem.featurizers.Featurizer``).
        num_classes: classes per label column of a multiclass task.
        feature_columns: descriptor columns of the user's table, read beside the SMILES.
    """
    info = {"name": name, "task": task, "target_names": list(target_names),
            "atom_feature_dims": list(featurizer.atom_feature_dims),
            "edge_feature_dims": list(featurizer.edge_feature_dims),
            "featurizer": featurizer.to_config()}
    if featurizer.mol_feature_dim or feature_columns:
        info["mol_feature_dim"] = featurizer.mol_feature_dim + len(feature_columns)
    if num_classes is not None:
        info["num_classes"] = int(num_classes)
    if feature_columns:
        info["feature_columns"] = list(feature_columns)
    return info


def _statistics(values: torch.Tensor) -> tuple[list[float], list[float]]:
    """Per column: the mean and sample standard deviation of the finite values ``[N, C]``."""
    present = torch.isfinite(values)
    count = present.sum(0).clamp(min=1)
    mean = torch.where(present, values, 0).sum(0) / count
    square = torch.where(present, (values - mean).square(), 0).sum(0)
    return mean.tolist(), (square / (count - 1).clamp(min=1)).sqrt().tolist()


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
    caching them. Training batches are uniform random samples of the training set, drawn anew
    each epoch; evaluation batches hold molecules of similar size (a graph's prediction does not
    depend on its batch mates in evaluation). Under DDP each process takes its own share of the
    batches (set ``trainer.use_distributed_sampler=False``; the CLI does).

    Args:
        root: data root; each dataset lives in its own folder below it. Default: ``'data'``.
        batch_size: graphs per training batch (per process under DDP). Default: 256.
        eval_batch_size: graphs per evaluation batch; ``None`` for ``batch_size``.
        num_workers: DataLoader worker processes. Default: 0.
        multi_hop_max_dist: hops of each shortest path the collator keeps; the CLI links it to
            the model's. Default: 20.
        seed: seed of the training batch order (epoch ``e`` uses ``seed + e``). Default: 0.
        train_batches: ``'random'`` (default): uniform random batches. ``'size_grouped'``:
            batches of molecules of similar size (pools of 50 batches sorted by size), less
            padding on the CPU but biased batch statistics; an opt-in for models without
            BatchNorm, refused at fit time for one with it (SepNorm's default).
        engine: a :class:`~graphormer_sepnorm.grid.engine.GridEngine` to serve grid batches
            gathered on the training device (static shapes, for a compiled GPU step);
            ``None`` (default): a DataLoader of the collator's batches, except for packed
            replicas, which take a default ``GridEngine``.
        replica_seeds: the seeds of packed replicas trained on these batches, one batch order
            per seed (the CLI links the model's ``seeds`` here); ``None``: one model (default).
    """

    def __init__(self, root: str = "data", batch_size: int = 256,
                 eval_batch_size: int | None = None, num_workers: int = 0,
                 multi_hop_max_dist: int = 20, seed: int = 0,
                 train_batches: TrainBatches = "random",
                 engine: GridEngine | None = None,
                 replica_seeds: list[int] | None = None) -> None:
        super().__init__()
        if train_batches not in ("random", "size_grouped"):
            raise ValueError(f"train_batches must be 'random' or 'size_grouped', not "
                             f"{train_batches!r}")
        self.train_batches = train_batches
        self.replica_seeds = list(replica_seeds) if replica_seeds else None
        self.engine = engine
        self.root = root
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.num_workers = num_workers
        self.multi_hop_max_dist = multi_hop_max_dist
        self.seed = seed
        self.splits: dict[str, list[Data]] | None = None

    def save_hyperparameters(self, *args: Any, ignore: Sequence[str] | str | None = None,
                             frame: FrameType | None = None, logger: bool = True) -> None:
        """Lightning's, with ``engine`` kept as its plain config (checkpoints load weights-only).

        ``engine`` is saved as ``{'class_path': ..., 'init_args': {...}}`` or ``None``, what
        ``--data.init_args.engine`` takes back.
        """
        ignore = [ignore] if isinstance(ignore, str) else list(ignore or [])
        super().save_hyperparameters(*args, ignore=[*ignore, "engine"],
                                     frame=frame or inspect.currentframe().f_back, logger=logger)
        engine = None if self.engine is None else self.engine.config()
        super().save_hyperparameters({"engine": engine}, logger=logger)

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
        """Mean and standard deviation of each target over its labelled training molecules."""
        self.setup("fit")
        return _statistics(torch.cat([g.y.reshape(1, -1).float() for g in self.splits["train"]]))

    def feature_statistics(self) -> tuple[list[float], list[float]]:
        """Mean and standard deviation of each descriptor column over the training split.

        The last ``len(dataset_info['feature_columns'])`` columns of the graphs' ``mol_x``.
        """
        self.setup("fit")
        columns = len(self.dataset_info.get("feature_columns", []))
        x = torch.cat([g.mol_x.reshape(1, -1).float() for g in self.splits["train"]])
        return _statistics(x[:, x.shape[1] - columns:])

    def _sampler(self, split: str, train: bool, seed: int,
                 drop_last: bool = False) -> Sampler[list[int]]:
        assert self.splits is not None, "call setup() first"
        sizes = [g.num_nodes for g in self.splits[split]]
        batch_size = self.batch_size if train else self.eval_batch_size
        # Evaluation batches come from one pool sorted by size (order never changes a metric,
        # BatchNorm uses its running statistics); training batches are uniform random samples
        # unless size grouping was asked for (it biases every statistic taken over a batch).
        pool = max(1, len(sizes))
        if train:
            pool = SIZE_GROUPED_POOL if self.train_batches == "size_grouped" else 1
        drop_last = drop_last and len(sizes) >= batch_size  # never an empty epoch
        batches = SizeGroupedBatchSampler(sizes, batch_size, seed=seed, pool_batches=pool,
                                          drop_last=drop_last)
        world = self.trainer.world_size if self.trainer is not None else 1
        rank = self.trainer.global_rank if self.trainer is not None else 0
        if world > 1:
            batches = ShardedBatches(batches, rank, world, even=train)
        # training batches resume mid-epoch exactly where a checkpoint left them
        return ResumableBatchSampler(batches) if train else batches

    def _batches_done(self) -> int:
        return batches_done(self.trainer)

    def _loader(self, split: str, train: bool, packed: bool | None = None,
                pad: bool = False) -> DataLoader | DeviceBatches:
        """A split's batches; ``packed``: one per replica (default: for training batches).

        ``pad``: padded as the engine pads training steps' batches.
        """
        seeds = self.replica_seeds
        if seeds and self.engine is None:  # packed replicas train on stacked grid batches
            self.engine = GridEngine()
        engine = self.engine
        if engine is not None:
            packed = train and seeds is not None if packed is None else packed
            samplers = [self._sampler(split, train, seed, drop_last=train)
                        for seed in (seeds if packed else [self.seed])]
            device = self.trainer.strategy.root_device if self.trainer is not None else None
            return engine.batches(split, self.splits[split], samplers, self.multi_hop_max_dist,
                                  device, stack=packed, pad=pad, done=self._batches_done)
        loader, resumable = DataLoader, {}
        if train:
            loader, resumable = ResumableLoader, {"done": self._batches_done}
        return loader(GraphList(self.splits[split]),
                      batch_sampler=self._sampler(split, train, self.seed),
                      num_workers=self.num_workers,
                      collate_fn=GraphormerCollator(self.multi_hop_max_dist),
                      persistent_workers=self.num_workers > 0, **resumable)

    def train_dataloader(self) -> DataLoader | DeviceBatches:
        """Training batches: uniform random samples (or size-grouped, see ``train_batches``)."""
        if self.train_batches == "size_grouped":
            warnings.warn("train_batches='size_grouped': every training batch holds molecules "
                          "of nearly one size, which biases batch statistics and gradients; "
                          "use it only for models without BatchNorm", stacklevel=2)
        return self._loader("train", train=True, pad=True)

    def statistics_dataloader(self) -> DataLoader | DeviceBatches:
        """Random training batches for one model, also in a packed fit.

        As the engine serves them: what :mod:`~graphormer_sepnorm.training.batch_statistics`
        re-estimates from.
        """
        return self._loader("train", train=True, packed=False)

    def val_dataloader(self) -> DataLoader | DeviceBatches:
        """Validation batches (each graph once)."""
        return self._loader("val", train=False)

    def test_dataloader(self) -> DataLoader | DeviceBatches:
        """Test batches (each graph once)."""
        return self._loader("test", train=False)

    def predict_dataloader(self) -> DataLoader:
        """The test split in its own order (predictions line up with the dataset)."""
        assert self.splits is not None, "call setup() first"
        return DataLoader(GraphList(self.splits["test"]), batch_size=self.eval_batch_size,
                          collate_fn=GraphormerCollator(self.multi_hop_max_dist),
                          num_workers=self.num_workers)
