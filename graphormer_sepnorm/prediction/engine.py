"""Featurize, batch and run a loaded model on SMILES, chunk by chunk.

Within a chunk the molecules are sorted by size before batching (little padding), then the
results are put back in input order. The model is in eval mode (BatchNorm uses its running
statistics), so a molecule's prediction does not depend on its batch: batch size and row order
change nothing beyond float noise. Featurization (RDKit, shortest paths) can run in worker
processes, overlapping with the model on the previous chunk.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch
from torch_geometric.data import Data

from graphormer_sepnorm.data import GraphormerCollator, add_shortest_paths
from graphormer_sepnorm.featurizers import Featurizer, featurize_many, featurizer_from_config

if TYPE_CHECKING:  # worker processes import this module: keep Lightning out of them
    from graphormer_sepnorm.training.module import GraphormerModule

#: Molecule size cap when the checkpoint's featurizer sets none (memory stays bounded).
DEFAULT_MAX_ATOMS = 256
T = TypeVar("T")


@dataclass
class ChunkResult:
    """Results of one chunk, in input order.

    Attributes:
        predictions: ``[n, num_targets]`` float64, NaN for flagged rows.
        errors: Per row, ``''`` or the reason it was flagged.
        embeddings: ``[n, D]`` float32 graph-token embeddings (NaN rows when flagged), or
            ``None`` when not asked for.
    """

    predictions: np.ndarray
    errors: list[str]
    embeddings: np.ndarray | None = None


def prediction_columns(dataset_info: dict[str, Any]) -> list[str]:
    """``<target>`` per target for regression, ``<target>_probability`` for binary tasks."""
    names = [str(name) for name in dataset_info["target_names"]]
    if dataset_info["task"] == "binary":
        return [f"{name}_probability" for name in names]
    return names


def featurize_with_paths(smiles: Sequence[Any], featurizer: Featurizer
                         ) -> tuple[list[Data | None], list[str]]:
    """Graphs with shortest paths (``None`` where flagged) and per-row errors (``''`` if fine)."""
    graphs, errors = featurize_many(smiles, featurizer)
    add_shortest_paths([g for g in graphs if g is not None])
    return graphs, [e or "" for e in errors]


_worker_featurizer: Featurizer | None = None


def _init_worker(config: dict[str, Any]) -> None:
    global _worker_featurizer
    torch.set_num_threads(1)
    _worker_featurizer = featurizer_from_config(config)


Packed = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None


def _pack(graph: Data | None) -> Packed:
    """Numpy arrays: plain bytes through the pipe (torch would share one fd per tensor)."""
    if graph is None:
        return None
    return graph.x.numpy(), graph.edge_index.numpy(), graph.edge_attr.numpy(), graph.spd.numpy()


def _unpack(packed: Packed) -> Data | None:
    if packed is None:
        return None
    x, edge_index, edge_attr, spd = (torch.from_numpy(a) for a in packed)
    return Data(x=x, edge_index=edge_index, edge_attr=edge_attr, spd=spd, num_nodes=len(x))


def _worker_featurize(smiles: list[Any]) -> tuple[list[Packed], list[str]]:
    assert _worker_featurizer is not None
    graphs, errors = featurize_with_paths(smiles, _worker_featurizer)
    return [_pack(g) for g in graphs], errors


def size_sorted_batches(sizes: Sequence[int], batch_size: int,
                        max_pairs: int | None = None) -> list[list[int]]:
    """Indices sorted by size (stable), cut into batches of at most ``batch_size``.

    A batch also stops before ``B * (N_max + 1)^2`` exceeds ``max_pairs`` (default:
    ``batch_size * 65^2``), so a few large molecules never make a huge attention tensor.
    """
    budget = max_pairs if max_pairs is not None else batch_size * 65 ** 2
    order = np.argsort(np.asarray(sizes, dtype=np.int64), kind="stable")
    batches: list[list[int]] = []
    current: list[int] = []
    for index in order.tolist():
        grown = (len(current) + 1) * (sizes[index] + 1) ** 2  # sizes increase along the order
        if current and (len(current) == batch_size or grown > budget):
            batches.append(current)
            current = []
        current.append(index)
    return batches + [current] if current else batches


class Predictor:
    """Runs a :class:`GraphormerModule` on SMILES.

    Args:
        module: The loaded model (see :func:`load_checkpoint`); put in eval mode.
        batch_size: Molecules per model batch. Default: 256.
        device: Where the model runs; default: where its parameters are.
        num_workers: Featurization processes; 0 featurizes in this process. Default: 0.
        max_atoms: Largest molecule accepted; default: the checkpoint's featurizer limit, or
            :data:`DEFAULT_MAX_ATOMS` when it sets none.
    """

    def __init__(self, module: GraphormerModule, batch_size: int = 256,
                 device: str | torch.device | None = None, num_workers: int = 0,
                 max_atoms: int | None = None) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        info = module.dataset_info
        self.featurizer = featurizer_from_config(info["featurizer"])
        self.featurizer.max_atoms = max_atoms or self.featurizer.max_atoms or DEFAULT_MAX_ATOMS
        self.device = torch.device(device) if device else next(module.parameters()).device
        self.module = module.to(self.device).eval()
        self.columns = prediction_columns(info)
        self.batch_size = batch_size
        self.collator = GraphormerCollator(module.hparams["multi_hop_max_dist"])
        self.num_workers = num_workers
        self._pool: Any = None

    def __enter__(self) -> Predictor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stops the featurization workers, if any."""
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    @property
    def embedding_dim(self) -> int:
        """Width ``D`` of the graph-token embeddings."""
        return int(self.module.hparams["hidden_dim"])

    def _outputs(self, emb: torch.Tensor) -> torch.Tensor:
        """Same as ``GraphormerModule.forward`` from the graph-token embeddings."""
        return self.module.to_predictions(self.module.model.head(emb))

    @torch.inference_mode()
    def predict_graphs(self, graphs: Sequence[Data | None], errors: Sequence[str],
                       return_embeddings: bool = False) -> ChunkResult:
        """Runs the model on featurized rows (``None`` graphs stay NaN), in input order."""
        rows = [i for i, g in enumerate(graphs) if g is not None]
        preds = np.full((len(graphs), len(self.columns)), np.nan)
        embs = np.full((len(graphs), self.embedding_dim), np.nan, dtype=np.float32)
        sizes = [graphs[i].num_nodes for i in rows]
        for batch in size_sorted_batches(sizes, self.batch_size):
            members = [rows[k] for k in batch]
            collated = self.collator([graphs[i] for i in members]).to(self.device)
            emb = self.module.model.embed(collated)
            preds[members] = self._outputs(emb).double().cpu().numpy()
            if return_embeddings:
                embs[members] = emb.float().cpu().numpy()
        return ChunkResult(preds, list(errors), embs if return_embeddings else None)

    def predict(self, smiles: Sequence[Any], return_embeddings: bool = False) -> ChunkResult:
        """Featurizes (in this process) and predicts ``smiles``."""
        graphs, errors = featurize_with_paths(smiles, self.featurizer)
        return self.predict_graphs(graphs, errors, return_embeddings)

    def _start_pool(self) -> Any:
        if self._pool is None:
            context = multiprocessing.get_context("spawn")
            self._pool = context.Pool(self.num_workers, _init_worker,
                                      (self.featurizer.to_config(),))
        return self._pool

    def _submit(self, smiles: list[Any], in_process: bool = False
                ) -> Callable[[], tuple[list[Data | None], list[str]]]:
        """Starts featurizing; the returned function waits for the graphs and errors."""
        if self.num_workers <= 0 or in_process:
            return lambda: featurize_with_paths(smiles, self.featurizer)
        pool = self._start_pool()
        step = max(1, -(-len(smiles) // (4 * self.num_workers)))
        parts = [pool.apply_async(_worker_featurize, (smiles[i:i + step],))
                 for i in range(0, len(smiles), step)]

        def wait() -> tuple[list[Data | None], list[str]]:
            graphs: list[Data | None] = []
            errors: list[str] = []
            for part in parts:
                g, e = part.get()
                graphs += [_unpack(packed) for packed in g]
                errors += e
            return graphs, errors

        return wait

    def predict_stream(self, chunks: Iterable[T], smiles_of: Callable[[T], Sequence[Any]],
                       return_embeddings: bool = False, prefetch: int = 2
                       ) -> Iterator[tuple[T, ChunkResult]]:
        """Predicts chunk after chunk, featurizing up to ``prefetch`` chunks ahead in workers.

        The first chunk is featurized in this process, so a short input never waits for worker
        processes to start; they start with the second chunk and run while the first one is
        featurized and predicted.

        Yields:
            Each chunk with its :class:`ChunkResult`, in order.
        """
        pending: deque[tuple[T, Callable[[], Any]]] = deque()
        ahead = max(1, prefetch) if self.num_workers > 0 else 0
        for index, chunk in enumerate(chunks):
            pending.append((chunk, self._submit(list(smiles_of(chunk)), index == 0)))
            while len(pending) > ahead:
                yield self._finish(*pending.popleft(), return_embeddings)
        while pending:
            yield self._finish(*pending.popleft(), return_embeddings)

    def _finish(self, chunk: T, wait: Callable[[], Any], return_embeddings: bool
                ) -> tuple[T, ChunkResult]:
        graphs, errors = wait()
        return chunk, self.predict_graphs(graphs, errors, return_embeddings)


def default_num_workers() -> int:
    """Featurization processes worth starting here: one per core beyond the first, at most 4."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(0, min(4, (cores or 1) - 1))
