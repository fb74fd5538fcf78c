"""Predicting a whole SMILES file: stream chunks in, write predictions out as they come."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from tqdm import tqdm

from graphormer_sepnorm.prediction.checkpoints import DEFAULT_CHECKPOINT
from graphormer_sepnorm.prediction.engine import ChunkResult, Predictor, default_num_workers
from graphormer_sepnorm.prediction.ensembles import predictor_models
from graphormer_sepnorm.prediction.io import (
    EmbeddingWriter,
    InputError,
    TableWriter,
    check_writable,
    default_output,
    read_chunks,
    unique_names,
)


class StrictError(ValueError):
    """``--strict``: a row could not be predicted; the message names the row."""


@dataclass
class Summary:
    """Counts of a finished (or stopped) run, and the featurization processes it used."""

    rows: int = 0
    predicted: int = 0
    flagged: int = 0
    seconds: float = 0.0
    output: Path | None = None
    workers: int = 0

    def add(self, errors: list[str]) -> None:
        """Counts rows written, with their errors (``''`` when predicted)."""
        flagged = sum(bool(e) for e in errors)
        self.rows += len(errors)
        self.flagged += flagged
        self.predicted += len(errors) - flagged

    def line(self) -> str:
        """``rows: N, predicted: P, flagged: F`` with the output file and the rate."""
        rate = self.rows / self.seconds if self.seconds > 0 else 0.0
        return (f"rows: {self.rows}, predicted: {self.predicted}, flagged: {self.flagged} "
                f"-> {self.output} ({self.seconds:.1f} s, {rate:.0f} rows/s)")


def resolve_device(accelerator: str = "cpu", devices: str | int = "auto") -> torch.device:
    """One torch device from Lightning-style ``accelerator`` and ``devices``.

    ``devices`` is ``'auto'``, ``1`` (the first device), or one index in a list (``'[1]'``,
    ``'1,'``); prediction runs on a single device.

    Raises:
        ValueError: Unknown or unavailable accelerator, or more than one device.
    """
    kind = {"gpu": "cuda"}.get(accelerator, accelerator)
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind not in ("cpu", "cuda", "mps"):
        raise ValueError(f"unknown accelerator {accelerator!r}; use auto, cpu, gpu/cuda or mps")
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError("accelerator 'cuda' asked for, but no CUDA device is available")
    text = str(devices).strip()
    index = 0
    if "," in text or text.startswith("["):
        indices = [int(t) for t in text.strip("[]").split(",") if t.strip()]
        if len(indices) != 1:
            raise ValueError(f"prediction runs on one device; got devices={devices!r}")
        index = indices[0]
    elif text not in ("auto", "1", "-1"):
        raise ValueError(f"prediction runs on one device; got devices={devices!r} "
                         "(use 1, or [i] for device i)")
    return torch.device(kind) if kind == "cpu" else torch.device(kind, index)


def _result_frame(chunk: pd.DataFrame, columns: list[str], result: ChunkResult) -> pd.DataFrame:
    """The input chunk, then the prediction columns, then ``error``."""
    names = unique_names([str(c) for c in chunk.columns], columns + ["error"])
    out = chunk.copy()
    for k, name in enumerate(names[:-1]):
        out[name] = result.predictions[:, k]
    out[names[-1]] = result.errors
    return out


def _check_output(output: Path, embeddings: Path | None, overwrite: bool, source: Path) -> None:
    for path in [output] + ([embeddings] if embeddings else []):
        check_writable(path, overwrite)
        if path.exists() and path.resolve() == source.resolve():
            raise InputError(f"{path} is the input file; choose another output")


def _share_cores(device: torch.device, workers: int) -> None:
    """On CPU, leaves the featurization workers their cores (unless OMP_NUM_THREADS is set).

    Oversubscribed OpenMP threads spin against the workers and slow the model down severalfold.
    """
    if device.type == "cpu" and workers > 0 and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) - workers))


def _first_error(result: ChunkResult) -> int | None:
    return next((i for i, e in enumerate(result.errors) if e), None)


def predict_file(source: Path, output: Path | None = None,
                 checkpoint: str | Sequence[str] = DEFAULT_CHECKPOINT,
                 smiles_column: str = "smiles", batch_size: int = 256,
                 device: torch.device | str = "cpu", overwrite: bool = False,
                 strict: bool = False, embeddings: Path | None = None,
                 progress: bool | None = None, num_workers: int | None = None,
                 chunk_size: int = 4096) -> Summary:
    """Predicts every row of a SMILES file into a CSV, chunk by chunk, in input order.

    Args:
        source: ``.csv``/``.tsv``/``.smi``/``.txt``, optionally ``.gz``.
        output: Output CSV; default ``<input stem>_preds.csv`` next to the input.
        checkpoint: Checkpoint file or bundled model name, or several: an ensemble
            (:mod:`~graphormer_sepnorm.prediction.ensembles`).
        smiles_column: SMILES column of a CSV/TSV input.
        batch_size: Molecules per model batch.
        device: Where the model runs.
        overwrite: Replace existing output files.
        strict: Stop at the first row that cannot be predicted, writing nothing.
        embeddings: Also write the graph-token embeddings ``[rows, D]`` (NaN rows when flagged).
        progress: Progress bar on stderr; default: when stderr is a terminal.
        num_workers: Featurization processes; default: one per core (at most 4), beyond the
            first when the model has no RDKit descriptors to compute (:func:`default_num_workers`).
        chunk_size: Rows read, featurized and written at a time.

    Raises:
        InputError: Unusable input or output (existing output without ``overwrite``).
        CheckpointError: Unknown, missing or unsafe checkpoint.
        StrictError: With ``strict``, the first row that could not be predicted.

    Output files appear only when the whole input is done: a run stopped by ``strict``, an
    exception or ``KeyboardInterrupt`` removes its temporary files and leaves no output (the
    exception carries a note with the rows done).
    """
    started = time.perf_counter()
    output = output or default_output(source)
    _check_output(output, embeddings, overwrite, source)
    models, blend, calibration, note = predictor_models(checkpoint)
    if note:
        print(f"graphormer-sepnorm-predict: {note}", file=sys.stderr)
    info = (models[0].module if isinstance(models, list) else models).dataset_info
    column, chunks = read_chunks(source, smiles_column, chunk_size)
    workers = (default_num_workers(info.get("featurizer"))
               if num_workers is None else num_workers)
    _share_cores(torch.device(device), workers)
    summary = Summary(output=output, workers=workers)
    show = sys.stderr.isatty() if progress is None else progress
    with Predictor(models, batch_size, device, workers, blend=blend,
                   calibration=calibration) as predictor, \
            ExitStack() as stack:
        # entered last, left first: on any exception the writers remove their temporary files
        table = stack.enter_context(TableWriter(output, overwrite))
        vectors = stack.enter_context(EmbeddingWriter(
            embeddings, predictor.embedding_dim, overwrite)) if embeddings else None
        bar = stack.enter_context(tqdm(unit="mol", file=sys.stderr, dynamic_ncols=True,
                                       disable=not show))
        try:
            stream = predictor.predict_stream(chunks, lambda c: predictor.rows_of(c, column),
                                              return_embeddings=vectors is not None)
            for chunk, result in stream:
                _write_chunk(chunk, result, column, predictor.columns, strict, table, vectors,
                             summary)
                bar.update(len(result.errors))
        except BaseException as e:
            if not isinstance(e, StrictError):
                note = (f"stopped after row {summary.rows} of {source}; "
                        f"no output written ({output} left as it was)")
                e.__notes__ = [*getattr(e, "__notes__", []), note]  # add_note, Python 3.10 too
            raise
    summary.seconds = time.perf_counter() - started
    return summary


def _write_chunk(chunk: pd.DataFrame, result: ChunkResult, column: str, columns: list[str],
                 strict: bool, table: TableWriter, vectors: EmbeddingWriter | None,
                 summary: Summary) -> None:
    """Writes one chunk's rows (to the temporary files).

    Raises:
        StrictError: With ``strict``, the chunk's first row that could not be predicted.
    """
    stop = _first_error(result) if strict else None
    if stop is not None:
        line = chunk.attrs.get("first_line", summary.rows + 1) + stop
        raise StrictError(f"line {line}: {result.errors[stop]} "
                          f"(SMILES {chunk[column].iloc[stop]!r}); stopped (--strict), "
                          "no output written")
    table.write(_result_frame(chunk, columns, result))
    if vectors is not None:
        vectors.write(result.embeddings)
    summary.add(result.errors)
