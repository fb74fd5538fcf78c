"""Shared datamodule logic: cached shortest paths, random training batches, DDP sharding."""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, Dataset, Sampler
from torch_geometric.data import Data

from graphormer_sepnorm.data import GraphormerCollator, SizeGroupedBatchSampler, add_shortest_paths
from graphormer_sepnorm.data import sequences as attention_sequences
from graphormer_sepnorm.data.device_batches import DeviceBatches
from graphormer_sepnorm.data.grid import GridGraphs
from graphormer_sepnorm.data.resumable import ResumableBatchSampler, ResumableLoader, batches_done
from graphormer_sepnorm.nn import token_rows

SPLITS = ("train", "val", "test")
TrainBatches = Literal["random", "size_grouped"]
Engine = Literal["loader", "device"]
TrainLength = Literal["bucketed", "longest"]
TrainTokens = Literal["grid", "rows", "sequences"]
#: Batches per size-sorted pool when training batches are size-grouped (an opt-in).
SIZE_GROUPED_POOL = 50


def make_dataset_info(name: str, task: str, target_names: Sequence[str],
                      featurizer: Any) -> dict[str, Any]:
    """The ``dataset_info`` a model is built from: task, targets, the featurizer and its dims.

    ``mol_feature_dim`` is there only when the featurizer computes molecule features.

    Args:
        name: the dataset's name.
        task: ``'regression'`` or ``'binary'``.
        target_names: one name per output.
        featurizer: a :class:`~graphormer_sepnorm.chem.featurizers.Featurizer`.
    """
    info = {"name": name, "task": task, "target_names": list(target_names),
            "atom_feature_dims": list(featurizer.atom_feature_dims),
            "edge_feature_dims": list(featurizer.edge_feature_dims),
            "featurizer": featurizer.to_config()}
    if featurizer.mol_feature_dim:
        info["mol_feature_dim"] = featurizer.mol_feature_dim
    return info


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
        engine: ``'loader'`` (default): a DataLoader of the collator's batches. ``'device'``:
            each split is walked once and kept on the training device
            (:class:`~graphormer_sepnorm.data.grid.GridGraphs`); a step's batch is gathered
            there with static shapes (``data.device_batches.DeviceBatches``), and the last
            incomplete training batch of an epoch is dropped. On the CPU, where the
            CPU backend runs the collator's batches fastest, ``'device'`` serves the loader's
            (still dropping that batch), except for packed replicas, which need the grid.
        replica_seeds: one seed per packed replica (the model's ``seeds``; the CLI links them):
            each replica draws its own training batches. ``None``: one replica, ``seed``.
        train_length: the padded length of the device engine's training batches.
            ``'bucketed'`` (default): the batch's largest molecule rounded up to one of a
            handful of lengths (:meth:`GridGraphs.lengths
            <graphormer_sepnorm.data.grid.GridGraphs.lengths>`). ``'longest'``: every batch
            padded to the split's largest (rounded up), one shape, so that a compiled training
            step compiles once: on an H200 each padded length compiled MolHIV's step anew, about
            100 s apiece (2026-11-27), for a step of milliseconds. Evaluation and statistics
            batches keep the bucketed lengths: they run eagerly.
        train_tokens: how the device engine's training batches hold their tokens. ``'grid'``
            (default): every position of the padded grid. ``'rows'``: also as packed rows of
            real tokens, a fixed count per fit (:meth:`GridGraphs.atom_rows_for
            <graphormer_sepnorm.data.grid.GridGraphs.atom_rows_for>`), on which the model does
            its token-wise work (:mod:`~graphormer_sepnorm.nn.token_rows`): the same function
            with less padding to compute. ``'sequences'``: rows, and attention in sequences of
            several molecules each, apart by a block-diagonal bias
            (:mod:`~graphormer_sepnorm.data.sequences`), not on the padded grid: MolHIV's
            training batches pad to 224 atoms for molecules of 25.
    """

    def __init__(self, root: str = "data", batch_size: int = 256,
                 eval_batch_size: int | None = None, num_workers: int = 0,
                 multi_hop_max_dist: int = 20, seed: int = 0,
                 train_batches: TrainBatches = "random", engine: Engine = "loader",
                 replica_seeds: list[int] | None = None,
                 train_length: TrainLength = "bucketed",
                 train_tokens: TrainTokens = "grid") -> None:
        super().__init__()
        if train_batches not in ("random", "size_grouped"):
            raise ValueError(f"train_batches must be 'random' or 'size_grouped', not "
                             f"{train_batches!r}")
        if engine not in ("loader", "device"):
            raise ValueError(f"engine must be 'loader' or 'device', not {engine!r}")
        if replica_seeds is not None and engine != "device":
            raise ValueError("packed replicas (replica_seeds) train with engine='device'")
        if train_length not in ("bucketed", "longest"):
            raise ValueError(f"train_length must be 'bucketed' or 'longest', not "
                             f"{train_length!r}")
        if train_tokens not in ("grid", "rows", "sequences"):
            raise ValueError(f"train_tokens must be 'grid', 'rows' or 'sequences', not "
                             f"{train_tokens!r}")
        self.train_length, self.train_tokens = train_length, train_tokens
        self.train_batches = train_batches
        self.engine = engine
        self.replica_seeds = list(replica_seeds) if replica_seeds else None
        self._stores: dict[str, GridGraphs] = {}
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

    def _device(self) -> torch.device | None:
        return self.trainer.strategy.root_device if self.trainer is not None else None

    def _loader(self, split: str, train: bool, packed: bool | None = None,
                pad: bool = False) -> DataLoader | DeviceBatches:
        device = self._device()
        on_cpu = device is None or device.type == "cpu"
        if self.engine == "device" and (not on_cpu or self.replica_seeds):
            return self._device_batches(split, train, packed, device, pad)
        loader, resumable = DataLoader, {}
        if train:
            loader, resumable = ResumableLoader, {"done": self._batches_done}
        drop_last = train and self.engine == "device"  # as the grid batches do
        return loader(GraphList(self.splits[split]),
                      batch_sampler=self._sampler(split, train, self.seed, drop_last),
                      num_workers=self.num_workers,
                      collate_fn=GraphormerCollator(self.multi_hop_max_dist),
                      persistent_workers=self.num_workers > 0, **resumable)

    def _device_batches(self, split: str, train: bool, packed: bool | None,
                        device: torch.device | None, pad: bool = False) -> DeviceBatches:
        """The grid engine's batches; ``pad``: to ``train_length`` (the training steps')."""
        if packed is None:
            packed = train and self.replica_seeds is not None
        seeds = self.replica_seeds if packed else [self.seed]
        samplers = [self._sampler(split, train, seed, drop_last=train) for seed in seeds]
        if split not in self._stores:
            self._stores[split] = GridGraphs(self.splits[split], self.multi_hop_max_dist,
                                             device or "cpu")
        store = self._stores[split]
        length = int(store.lengths()[-1]) if pad and self.train_length == "longest" else None
        # GRAPHORMER_SEPNORM_TOKEN_ROWS=0 (a lease's fallback): not even the maps are gathered
        rows = store.atom_rows_for(self.batch_size) \
            if pad and self.train_tokens != "grid" and token_rows.ENABLED else None
        placed = attention_sequences.shape_for(store.sizes, self.batch_size) \
            if rows and self.train_tokens == "sequences" and attention_sequences.ENABLED else None
        return DeviceBatches(store, samplers, stack=packed, done=self._batches_done,
                             length=length, atom_rows=rows, sequences=placed)

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
