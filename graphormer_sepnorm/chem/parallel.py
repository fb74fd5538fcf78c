"""A whole set of SMILES featurized, in worker processes where that pays.

RDKit's descriptors are most of a molecule's featurization and hold the GIL, so the speed comes
from processes, as chemprop's does: :func:`featurize_set` splits a large set between worker
processes (started with ``spawn``, each rebuilding the featurizer from its config, as
prediction's workers do) and gives the same graphs, in the same order, as
:func:`featurize_many` in this process.
A set of fewer than :data:`MIN_ROWS_FOR_WORKERS` rows, or a featurizer without descriptors
(a fraction of a millisecond a molecule), stays in this process: a worker takes seconds to
start (it imports the package: torch, PyG, RDKit, ogb), what featurizing several hundred
molecules with descriptors takes, and on a machine whose cores are busy it gains nothing back.
"""

from __future__ import annotations

import multiprocessing
import os
import warnings
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from graphormer_sepnorm.chem.featurizers import (
    Featurizer,
    GraphArrays,
    featurize_many,
    featurizer_from_config,
)
from graphormer_sepnorm.chem.layout import DESCRIPTOR_FEATURES

__all__ = ["MAX_WORKERS", "MIN_ROWS_FOR_WORKERS", "featurize_set", "workers_for"]

#: Fewest rows featurized in worker processes.
MIN_ROWS_FOR_WORKERS = 5000
#: Most worker processes started.
MAX_WORKERS = 4

_featurizer: Featurizer | None = None  # a worker's, built once by _init_worker


def workers_for(rows: int, featurizer: Featurizer) -> int:
    """Worker processes :func:`featurize_set` starts for ``rows`` SMILES by default.

    One per core (at most :data:`MAX_WORKERS`) where ``featurizer`` computes RDKit descriptors,
    there are at least :data:`MIN_ROWS_FOR_WORKERS` rows and more than one core; else 0.
    """
    if rows < MIN_ROWS_FOR_WORKERS or not set(featurizer.mol_features) & set(DESCRIPTOR_FEATURES):
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return min(MAX_WORKERS, cores or 1) if (cores or 1) > 1 else 0


def featurize_set(smiles: Iterable[str], featurizer: Featurizer, workers: int | None = None,
                  as_arrays: bool = False) -> tuple[list[Any], list[str | None]]:
    """:func:`featurize_many` of a whole set, split between ``workers`` processes.

    Args:
        smiles: The SMILES, one per row.
        featurizer: What turns one into a graph; workers rebuild it from
            :meth:`~Featurizer.to_config`.
        workers: Worker processes; 0 featurizes in this process. Default:
            :func:`workers_for` the set.
        as_arrays: Give :class:`GraphArrays` instead of PyG ``Data``.

    Returns:
        Per row, the graph or ``None``, and ``None`` or the reason it failed.
    """
    rows = list(smiles)
    workers = workers_for(len(rows), featurizer) if workers is None else workers
    if workers <= 0 or len(rows) < 2:
        return featurize_many(rows, featurizer, as_arrays=as_arrays)
    step = -(-len(rows) // (4 * workers))  # four parts a worker: the load evens out
    parts = [rows[i:i + step] for i in range(0, len(rows), step)]
    try:
        with ProcessPoolExecutor(min(workers, len(parts)), multiprocessing.get_context("spawn"),
                                 _init_worker, (featurizer.to_config(),)) as pool:
            done = list(pool.map(_featurize_part, parts))
    except BrokenProcessPool as e:  # e.g. a script whose main module cannot be imported again
        warnings.warn(f"featurization workers could not run ({e}); featurizing {len(rows)} "
                      "molecules in this process instead", stacklevel=2)
        return featurize_many(rows, featurizer, as_arrays=as_arrays)
    graphs: list[Any] = [graph for part, _ in done for graph in part]
    errors = [error for _, part in done for error in part]
    if not as_arrays:
        graphs = [None if graph is None else graph.to_data() for graph in graphs]
    return graphs, errors


def _init_worker(config: dict[str, Any]) -> None:
    """A worker's start: its featurizer, rebuilt from the config."""
    global _featurizer
    _featurizer = featurizer_from_config(config)


def _featurize_part(smiles: Sequence[str]) -> tuple[list[GraphArrays | None], list[str | None]]:
    """One part of the set in a worker, as arrays (cheap to send back)."""
    assert _featurizer is not None, "the worker was started without _init_worker"
    return featurize_many(smiles, _featurizer, as_arrays=True)
