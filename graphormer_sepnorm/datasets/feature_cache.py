"""Featurized molecules kept in a file, keyed by the SMILES and the featurizer: featurize once.

A hyperparameter search fits tens of models on one file, cross-validation one per fold; each fit
would parse the same molecules and compute the same RDKit descriptors again, most of a small-data
fit's start (FreeSolv's 642 molecules with ``rdkit2d`` and ``morgan``: 7 s featurized, 0.06 s
read back, on 2 busy cores; ``benchmarks/feature_cache.py``, ``docs/results/hpo.md``).
:func:`featurize_cached` featurizes a set the first time
(:func:`~graphormer_sepnorm.chem.parallel.featurize_set`) and writes every graph's arrays into
one ``.npz`` in ``cache_dir``; later calls with the same SMILES, in the same order, and the same
featurizer read them back. The file is named by a SHA-256 of the SMILES, the featurizer's
:meth:`~graphormer_sepnorm.chem.featurizers.Featurizer.to_config` and RDKit's version, so
another set, featurizer or RDKit release gets a file of its own, and one folder serves any
number of sets.

Several processes may share a folder: the first to need a file writes it under an exclusive
lock (``<key>.lock``, ``fcntl.flock``; released when the process ends, however it ends) while
the others wait for it, and it appears complete or not at all (written aside, then renamed).
The graphs read back are the ones featurized, array for array (``tests/datasets``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import rdkit
from torch_geometric.data import Data

from graphormer_sepnorm.chem.featurizers import Featurizer, GraphArrays
from graphormer_sepnorm.chem.parallel import featurize_set

__all__ = ["FORMAT", "cache_key", "featurize_cached"]

#: Version of the file's layout; part of the key.
FORMAT = 1


def cache_key(smiles: Iterable[str], featurizer: Featurizer) -> str:
    """The SHA-256 (hex) of the SMILES in order, the featurizer's config and RDKit's version."""
    digest = hashlib.sha256(json.dumps(
        {"format": FORMAT, "featurizer": featurizer.to_config(), "rdkit": rdkit.__version__},
        sort_keys=True).encode())
    for text in smiles:
        data = text.encode()
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()


def featurize_cached(smiles: Iterable[str], featurizer: Featurizer, cache_dir: str | Path | None
                     ) -> tuple[list[Data | None], list[str | None]]:
    """:func:`~graphormer_sepnorm.chem.parallel.featurize_set` of the rows, through the cache.

    Args:
        smiles: the SMILES, one per row.
        featurizer: what turns one into a graph.
        cache_dir: the cache's folder (created if needed); ``None`` featurizes without one.

    Returns:
        Per row, the PyG graph or ``None``, and ``None`` or the reason it failed.
    """
    rows = list(smiles)
    if cache_dir is None:
        return featurize_set(rows, featurizer)
    folder = Path(cache_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{cache_key(rows, featurizer)}.npz"
    with _exclusive(path.with_suffix(".lock")):
        if not path.is_file():
            _write(path, *featurize_set(rows, featurizer, as_arrays=True))
    return _read(path)


@contextmanager
def _exclusive(lock: Path) -> Iterator[None]:
    """Holds an exclusive ``flock`` on ``lock`` (one writer; readers wait for it)."""
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _concat(parts: list[np.ndarray], axis: int, empty: tuple[int, ...], dtype: type) -> np.ndarray:
    return np.concatenate(parts, axis) if parts else np.zeros(empty, dtype)


def _write(path: Path, graphs: list[GraphArrays | None], errors: list[str | None]) -> None:
    """Every row's arrays (valid ones concatenated) into ``path``, atomically."""
    valid = [g for g in graphs if g is not None]
    arrays = {
        "errors": np.array(["" if e is None else e for e in errors], dtype=str),
        "valid": np.array([g is not None for g in graphs], dtype=bool),
        "atoms": np.array([len(g.x) for g in valid], dtype=np.int64),
        "edges": np.array([g.edge_index.shape[1] for g in valid], dtype=np.int64),
        "x": _concat([g.x for g in valid], 0, (0, 0), np.int64),
        "edge_index": _concat([g.edge_index for g in valid], 1, (2, 0), np.int64),
        "edge_attr": _concat([g.edge_attr for g in valid], 0, (0, 0), np.int64)}
    if valid and valid[0].mol_x is not None:
        arrays["mol_x"] = np.stack([g.mol_x for g in valid])
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    with open(partial, "wb") as handle:
        np.savez(handle, **arrays)
    os.replace(partial, path)


def _read(path: Path) -> tuple[list[Data | None], list[str | None]]:
    """The rows :func:`_write` wrote, as PyG graphs."""
    with np.load(path, allow_pickle=False) as arrays:
        data = {name: arrays[name] for name in arrays.files}
    atoms, edges = np.cumsum(data["atoms"])[:-1], np.cumsum(data["edges"])[:-1]
    parts = zip(np.split(data["x"], atoms), np.split(data["edge_index"], edges, axis=1),
                np.split(data["edge_attr"], edges), strict=True)
    mol_x = data.get("mol_x")
    valid = iter([GraphArrays(x, ei, ea, None if mol_x is None else mol_x[k]).to_data()
                  for k, (x, ei, ea) in enumerate(parts)] if len(data["atoms"]) else [])
    graphs = [next(valid) if ok else None for ok in data["valid"]]
    return graphs, [str(e) or None for e in data["errors"]]
