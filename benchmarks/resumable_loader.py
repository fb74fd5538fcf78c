"""An epoch of training batches: ``ResumableLoader`` against torchdata's ``StatefulDataLoader``.

Both resume a fit stopped mid-epoch with the same batches (Lightning saves and restores any
training loader with ``state_dict``/``load_state_dict``); this times what they cost when
nothing is resumed. On the same molecules (random ZINC-like graphs, shortest paths added), each
epoch drawn by the datamodule's batch sampler (``SizeGroupedBatchSampler``, seed + epoch):

- ``DataLoader``: torch's, not resumable (the baseline);
- ``ResumableLoader``: this package's (``data/resumable.py``), over a ``ResumableBatchSampler``;
- ``StatefulDataLoader``: torchdata's, over the same ``ResumableBatchSampler`` (Lightning sets
  the epoch of ``loader.batch_sampler.sampler``; the sampler's resume is never used);

with the training collator (``GraphormerCollator``: what an epoch costs) and with a collate
that only counts the batch (what the loader itself costs per batch), with 0 and 2 workers.
First each resumable loader resumes from a state saved after half an epoch and must serve
exactly that epoch's second half. Then the loaders alternate round by round, a round drawing
whole epochs for at least 50 ms; each figure is the median of the rounds' time per epoch.

Example (from the repository root)::

    .venv/bin/python benchmarks/resumable_loader.py
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read once, when torch starts

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
from gpu_step import synthetic  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

from graphormer_sepnorm.data import (  # noqa: E402
    GraphormerCollator,
    SizeGroupedBatchSampler,
    add_shortest_paths,
)
from graphormer_sepnorm.data.resumable import ResumableBatchSampler, ResumableLoader  # noqa: E402
from graphormer_sepnorm.datasets.base import GraphList  # noqa: E402

LOADERS = ("DataLoader", "ResumableLoader", "StatefulDataLoader")


def count(batch: list[Any]) -> int:
    """A collate that does nothing but count: the loader's own cost per batch."""
    return len(batch)


def first_index(batch: list[Any]) -> int:
    """A collate that names the batch by its first graph's index (``dataset`` of indices)."""
    return batch[0]


def make(kind: str, dataset: Any, sizes: list[int], batch_size: int, workers: int,
         collate: Callable[[list[Any]], Any], done: Callable[[], int] = lambda: 0) -> Any:
    """One loader of ``kind`` over ``dataset``, batches drawn as the datamodule draws them."""
    batches = SizeGroupedBatchSampler(sizes, batch_size, seed=0)
    common = {"num_workers": workers, "collate_fn": collate, "persistent_workers": workers > 0}
    if kind == "DataLoader":
        return DataLoader(dataset, batch_sampler=batches, **common)
    if kind == "ResumableLoader":
        return ResumableLoader(dataset, batch_sampler=ResumableBatchSampler(batches), done=done,
                               **common)
    return StatefulDataLoader(dataset, batch_sampler=ResumableBatchSampler(batches), **common)


def epoch_seconds(loader: Any, epoch: int, least: float = 0.05) -> float:
    """Seconds per epoch, over as many whole epochs as take ``least`` seconds.

    Each epoch's sampler epoch is set first, as Lightning sets it.
    """
    sampler = getattr(loader.batch_sampler, "sampler", loader.batch_sampler)
    epochs, start = 0, time.perf_counter()
    while epochs == 0 or time.perf_counter() - start < least:
        sampler.set_epoch(epoch + epochs)
        for _ in loader:
            pass
        epochs += 1
    return (time.perf_counter() - start) / epochs


def check_resume(kind: str, sizes: list[int], batch_size: int, workers: int) -> None:
    """Resumed from a state saved after half of epoch 3, the loader serves the rest of it."""
    done = {"n": 0}
    dataset = list(range(len(sizes)))
    loader = make(kind, dataset, sizes, batch_size, workers, first_index, lambda: done["n"])
    loader.batch_sampler.sampler.set_epoch(3)
    iterator = iter(loader)
    half = len(loader) // 2
    served = [next(iterator) for _ in range(half)]
    done["n"] = half
    state = loader.state_dict()
    rest = list(iterator)
    again = make(kind, dataset, sizes, batch_size, workers, first_index)
    again.load_state_dict(state)
    again.batch_sampler.sampler.set_epoch(3)
    assert list(again) == rest and len(served) + len(rest) == len(loader), kind
    again.batch_sampler.sampler.set_epoch(4)
    assert len(list(again)) == len(loader), kind  # the next epoch whole


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    graphs = add_shortest_paths(synthetic("zinc_subset", args.graphs))
    sizes = [g.num_nodes for g in graphs]
    for kind in LOADERS[1:]:
        for workers in args.workers:
            check_resume(kind, sizes, args.batch_size, workers)
    batches = len(SizeGroupedBatchSampler(sizes, args.batch_size))
    print(f"resumed after half an epoch, ResumableLoader and StatefulDataLoader each serve the "
          f"epoch's other half exactly (workers {args.workers})")
    print(f"\n{args.graphs} graphs, {batches} batches of {args.batch_size} an epoch, "
          f"{args.threads} thread(s); ms per epoch, median of {args.rounds} rounds, and per "
          f"batch the difference to DataLoader in microseconds")
    print("| collate | workers | " + " | ".join(LOADERS) + " |")
    print("| --- " * (2 + len(LOADERS)) + "|")
    collates = {"GraphormerCollator": GraphormerCollator(20), "count only": count}
    for (name, collate) in collates.items():
        for workers in args.workers:
            loaders = {k: make(k, GraphList(graphs), sizes, args.batch_size, workers, collate)
                       for k in LOADERS}
            for loader in loaders.values():
                epoch_seconds(loader, 0)  # warm-up (and the workers' start)
            times: dict[str, list[float]] = {k: [] for k in LOADERS}
            for index in range(args.rounds):
                shift = index % len(LOADERS)
                for kind in LOADERS[shift:] + LOADERS[:shift]:
                    times[kind].append(epoch_seconds(loaders[kind], 100 * index))
            base = statistics.median(times["DataLoader"])
            cells = []
            for kind in LOADERS:
                median = statistics.median(times[kind])
                extra = (median - base) / batches * 1e6
                cells.append(f"{median * 1e3:.1f}" + (f" ({extra:+.0f} us)" if kind != "DataLoader"
                                                      else ""))
            print(f"| {name} | {workers} | " + " | ".join(cells) + " |", flush=True)
            del loaders


if __name__ == "__main__":
    main()
