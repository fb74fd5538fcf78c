"""Featurize, batch and run a loaded model on SMILES, chunk by chunk.

Within a chunk (or each worker's part of one) the molecules are sorted by size before batching
(little padding), then the results are put back in input order. The model is in eval mode
(BatchNorm uses its running statistics), so a molecule's prediction does not depend on its
batch: batch size and row order change nothing beyond float noise. Featurization and collation
(:mod:`.prepare`) can run in worker processes, overlapping with the model on the previous chunk.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pandas as pd
import torch

from graphormer_sepnorm.chem.featurizers import featurizer_from_config
from graphormer_sepnorm.chem.layout import DESCRIPTOR_FEATURES
from graphormer_sepnorm.data import GraphormerBatch, GraphormerCollator
from graphormer_sepnorm.ensemble.blend import BlendedModel
from graphormer_sepnorm.ensemble.calibration import Z90
from graphormer_sepnorm.ensemble.members import Calibration, combine
from graphormer_sepnorm.prediction.io import InputError
from graphormer_sepnorm.prediction.prepare import (
    PreparedChunk,
    init_worker,
    prepare_chunk,
    prepare_in_worker,
    unpack,
)

if TYPE_CHECKING:  # worker processes import this module: keep Lightning out of them
    from graphormer_sepnorm.training.module import GraphormerModule

#: Molecule size cap when the checkpoint's featurizer sets none (memory stays bounded).
DEFAULT_MAX_ATOMS = 256
#: The featurization workers' start method, ``fork`` on Linux as for PyTorch's DataLoader
#: workers (a fork inherits the imported torch, PyG and RDKit; a spawned worker imports them
#: again, about 4 CPU s each, a tenth of the CPU of predicting 10,000 molecules with two
#: workers), ``spawn`` elsewhere (fork is unsafe on macOS).
WORKER_START = "fork" if sys.platform == "linux" else "spawn"
#: Rows of the first chunk featurized in the main process while the workers start (a worker
#: takes seconds to import torch, RDKit and the package: what 256 molecules with descriptors
#: take to featurize).
FIRST_ROWS_IN_PROCESS = 256
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
    """The model's output columns, in order.

    ``<target>`` per target for regression, ``<target>_probability`` for binary tasks, and
    ``<target>_class<k>_probability`` for ``k < num_classes`` for multiclass ones.
    """
    names = [str(name) for name in dataset_info["target_names"]]
    if dataset_info["task"] == "binary":
        return [f"{name}_probability" for name in names]
    if dataset_info["task"] == "multiclass":
        return [f"{name}_class{k}_probability" for name in names
                for k in range(int(dataset_info["num_classes"]))]
    return names


def ensemble_columns(dataset_info: dict[str, Any], calibrated: bool) -> list[str]:
    """An ensemble's columns: its prediction columns, each one's ``_std``, and intervals.

    ``<target>_lo90`` and ``<target>_hi90`` follow for a calibrated regression ensemble.
    """
    base = prediction_columns(dataset_info)
    columns = base + [f"{name}_std" for name in base]
    if calibrated and dataset_info["task"] == "regression":
        columns += [f"{name}_{kind}" for kind in ("lo90", "hi90")
                    for name in dataset_info["target_names"]]
    return columns


class Predictor:
    """Runs a :class:`GraphormerModule`, or an ensemble of them, on SMILES.

    Args:
        module: The loaded model (see
            :func:`~graphormer_sepnorm.prediction.checkpoints.load_checkpoint`), or an
            ensemble's members (:class:`~graphormer_sepnorm.prediction.ensembles.Member`);
            put in eval mode on ``device``.
        batch_size: Molecules per model batch. Default: 256.
        device: Where the model runs; default: where its parameters are.
        num_workers: Featurization processes; 0 featurizes in this process. Default: 0.
        max_atoms: Largest molecule accepted; default: the checkpoint's featurizer limit, or
            :data:`DEFAULT_MAX_ATOMS` when it sets none.
        blend: the fingerprint GP saved with the checkpoint
            (:func:`~graphormer_sepnorm.prediction.checkpoints.load_with_blend`): predictions are
            then the blend's. Default: none (the network's). Members carry their own.
        calibration: a regression ensemble's 90% intervals
            (:class:`~graphormer_sepnorm.ensemble.members.Calibration`); ``None``: its
            ``<target>_std`` is the members' raw mixture deviation and there is no interval.

    Attributes:
        columns: the prediction columns, in order (:func:`prediction_columns`, or for an
            ensemble :func:`ensemble_columns`).
        feature_columns: the descriptor columns the model reads from the input, by name.
    """

    def __init__(self, module: GraphormerModule | Sequence[Any], batch_size: int = 256,
                 device: str | torch.device | None = None, num_workers: int = 0,
                 max_atoms: int | None = None, blend: BlendedModel | None = None,
                 calibration: Calibration | None = None) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        members = list(module) if isinstance(module, list | tuple) else None
        if members is not None and len(members) == 1:
            module, blend, members = members[0].module, members[0].blend, None
        first = members[0].module if members else module
        info = first.dataset_info
        self.featurizer = featurizer_from_config(info["featurizer"])
        self.featurizer.max_atoms = max_atoms or self.featurizer.max_atoms or DEFAULT_MAX_ATOMS
        self.device = torch.device(device) if device else next(first.parameters()).device
        self.module = first.to(self.device).eval()
        self.members = members
        for member in members or []:
            member.module.to(self.device).eval()
            if member.blend is not None:
                member.blend.to(self.device).eval()
        self.blend = None if blend is None else blend.to(self.device).eval()
        self.calibration = calibration
        self.task = info["task"]
        self.columns = prediction_columns(info)
        if members:
            self.columns = ensemble_columns(info, calibration is not None)
        elif self.blend is not None and self.blend.calibrated:  # a deviation, a 90% interval
            self.columns += [f"{name}_{kind}" for kind in ("std", "lo90", "hi90")
                             for name in info["target_names"]]
        self.feature_columns = [str(c) for c in info.get("feature_columns", [])]
        self.batch_size = batch_size
        self.collator = GraphormerCollator(first.config.multi_hop_max_dist)
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

    def rows_of(self, frame: Any, smiles_column: str) -> list[Any]:
        """A table chunk's rows as :func:`~.prepare.prepare_chunk` takes them.

        The SMILES, with the model's descriptor columns as ``(smiles, values)`` when it reads
        any (a cell that is not a finite number is NaN: the row is flagged).

        Raises:
            InputError: the table lacks a descriptor column the model reads.
        """
        smiles = frame[smiles_column].tolist()
        if not self.feature_columns:
            return smiles
        missing = [c for c in self.feature_columns if c not in frame.columns]
        if missing:
            raise InputError(f"the model reads the descriptor column(s) {missing}, which the "
                             f"input lacks (its columns: {list(frame.columns)})")
        values = frame[self.feature_columns].apply(pd.to_numeric, errors="coerce")
        return list(zip(smiles, values.to_numpy(dtype=np.float64), strict=True))

    @property
    def embedding_dim(self) -> int:
        """Width ``D`` of the graph-token embeddings."""
        return self.module.config.hidden_dim

    def _outputs(self, emb: torch.Tensor, batch: GraphormerBatch) -> torch.Tensor:
        """``GraphormerModule.forward`` from the graph-token embeddings, blended if a GP is.

        With a calibrated blend, each target's deviation and 90% interval follow: ``[B, 4T]``.
        """
        preds = self.module.to_predictions(self.module.model.readout(emb, batch))
        if self.blend is None:
            return preds
        mean, std = self.blend.predict(preds, batch.mol_x)
        if std is None:
            return mean
        return torch.cat([mean, std, mean - Z90 * std, mean + Z90 * std], 1)

    def _ensemble_outputs(self, batch: GraphormerBatch) -> torch.Tensor:
        """The members' mean, each column's deviation, and a regression's 90% interval."""
        outputs = [member.outputs(batch) for member in self.members]
        mean, spread, total = combine(outputs)
        if self.task != "regression":
            return torch.cat([mean, spread], 1)
        if self.calibration is None:
            return torch.cat([mean, total], 1)
        means = torch.stack([m.double() for m, _ in outputs])
        lo, hi = self.calibration.interval(means, total)
        std = (hi - lo) / (2 * Z90)
        return torch.cat([mean, std, lo, hi], 1)

    @torch.inference_mode()
    def run(self, chunk: PreparedChunk, return_embeddings: bool = False) -> ChunkResult:
        """Runs the model (or ensemble) on a prepared chunk; flagged rows stay NaN."""
        if return_embeddings and self.members:
            raise ValueError("graph-token embeddings come from one model, not an ensemble")
        n = len(chunk.errors)
        preds = np.full((n, len(self.columns)), np.nan)
        embs = np.full((n, self.embedding_dim), np.nan, dtype=np.float32)
        for rows, batch in chunk:
            batch = batch.to(self.device)
            if self.members:
                preds[rows] = self._ensemble_outputs(batch).double().cpu().numpy()
                continue
            emb = self.module.model.embed(batch)
            preds[rows] = self._outputs(emb, batch).double().cpu().numpy()
            if return_embeddings:
                embs[rows] = emb.float().cpu().numpy()
        return ChunkResult(preds, list(chunk.errors), embs if return_embeddings else None)

    def predict(self, smiles: Sequence[Any], return_embeddings: bool = False) -> ChunkResult:
        """Featurizes (in this process) and predicts ``smiles``."""
        return self.run(self.prepare(smiles), return_embeddings)

    def prepare(self, smiles: Sequence[Any]) -> PreparedChunk:
        """Featurizes ``smiles`` in this process into a chunk :meth:`run` takes (reusable)."""
        return prepare_chunk(smiles, self.featurizer, self.collator, self.batch_size)

    def _start_pool(self) -> Any:
        if self._pool is None:
            context = multiprocessing.get_context(WORKER_START)
            self._pool = context.Pool(
                self.num_workers, init_worker,
                (self.featurizer.to_config(), self.collator.multi_hop_max_dist, self.batch_size))
        return self._pool

    def _submit(self, smiles: list[Any], in_process: int = 0) -> Callable[[], PreparedChunk]:
        """Starts preparing; the returned function waits for the prepared chunk.

        The first ``in_process`` rows are prepared in this process (when the function is
        called), the rest in the workers, four parts a worker, starting now.
        """
        if self.num_workers <= 0 or in_process >= len(smiles):
            return lambda: self.prepare(smiles)
        pool = self._start_pool()
        head = smiles[:in_process]
        step = max(1, -(-(len(smiles) - in_process) // (4 * self.num_workers)))
        parts = [(i, pool.apply_async(prepare_in_worker, (smiles[i:i + step],)))
                 for i in range(in_process, len(smiles), step)]

        def wait() -> PreparedChunk:
            merged = self.prepare(head) if head else PreparedChunk([], [])
            merged.collator = self.collator
            for offset, part in parts:
                prepared = unpack(part.get(), offset)
                merged.batches += prepared.batches
                merged.errors += prepared.errors
            return merged

        return wait

    def predict_stream(self, chunks: Iterable[T], smiles_of: Callable[[T], Sequence[Any]],
                       return_embeddings: bool = False, prefetch: int = 2
                       ) -> Iterator[tuple[T, ChunkResult]]:
        """Predicts chunk after chunk, featurizing up to ``prefetch`` chunks ahead in workers.

        The first :data:`FIRST_ROWS_IN_PROCESS` rows are featurized in this process, so a
        short input never waits for worker processes to start; the workers start with the rest
        of the first chunk and run while those rows are featurized and predicted. (Featurizing
        the whole first chunk here left the workers idle at the end of the input while this
        process predicted alone: 10,000 ZINC molecules in chunks of 4,096, 40% of them.)

        Yields:
            Each chunk with its :class:`ChunkResult`, in order.
        """
        pending: deque[tuple[T, Callable[[], Any]]] = deque()
        ahead = max(1, prefetch) if self.num_workers > 0 else 0
        for index, chunk in enumerate(chunks):
            head = FIRST_ROWS_IN_PROCESS if index == 0 else 0
            pending.append((chunk, self._submit(list(smiles_of(chunk)), head)))
            while len(pending) > ahead:
                yield self._finish(*pending.popleft(), return_embeddings)
        while pending:
            yield self._finish(*pending.popleft(), return_embeddings)

    def _finish(self, chunk: T, wait: Callable[[], PreparedChunk], return_embeddings: bool
                ) -> tuple[T, ChunkResult]:
        return chunk, self.run(wait(), return_embeddings)


def default_num_workers(featurizer: dict[str, Any] | None = None) -> int:
    """Featurization processes worth starting here, at most 4.

    One per core when the checkpoint's featurizer computes RDKit descriptors (any of
    ``chem.layout.DESCRIPTOR_FEATURES``): featurizing is then most of the work (all 174
    descriptors: about 4.7 of 5.9 CPU ms a ZINC molecule, and a second worker on a 2-core
    machine gave 274 against 232 molecules/s). Otherwise one per core beyond the first, which
    leaves the model a core (the bundled ZINC model: 2,196 molecules/s with one worker, 1,853
    with two).

    Args:
        featurizer: the checkpoint's featurizer config (``dataset_info['featurizer']``).
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    heavy = bool(set((featurizer or {}).get("mol_features") or []) & set(DESCRIPTOR_FEATURES))
    return max(0, min(4, (cores or 1) - (0 if heavy else 1)))
