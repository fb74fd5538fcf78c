"""Reading SMILES files in chunks and writing predictions as they come.

Inputs: ``.csv``/``.tsv`` (every column kept, read as text, quoted fields as CSV has them) and
``.smi``/``.txt`` (a SMILES, then an optional name after whitespace: columns ``smiles`` and
``name``), each optionally ``.gz``. Outputs: CSV (TSV for a ``.tsv`` name; gzip for ``.gz``),
created exclusively unless overwriting is asked for.
"""

from __future__ import annotations

import gzip
import io
import itertools
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import numpy as np
import pandas as pd

INPUT_KINDS = {".csv": "csv", ".tsv": "tsv", ".smi": "smi", ".txt": "smi"}


class InputError(ValueError):
    """An input or output file that cannot be used; the message says why."""


def _base_suffix(path: Path) -> str:
    """``'.csv'`` for ``x.csv`` and ``x.csv.gz``."""
    return Path(path.stem).suffix.lower() if path.suffix.lower() == ".gz" else path.suffix.lower()


def input_kind(path: Path) -> str:
    """``'csv'``, ``'tsv'`` or ``'smi'`` from the file name (``.gz`` allowed on any)."""
    kind = INPUT_KINDS.get(_base_suffix(path))
    if kind is None:
        raise InputError(f"{path}: unknown input type; use .csv, .tsv, .smi or .txt "
                         "(optionally .gz)")
    return kind


def default_output(path: Path) -> Path:
    """``<input stem>_preds.csv`` next to the input (``mols.smi.gz`` -> ``mols_preds.csv``)."""
    stem = Path(path.stem).stem if path.suffix.lower() == ".gz" else path.stem
    return path.with_name(f"{stem}_preds.csv")


def _open_text(path: Path) -> IO[str]:
    if path.suffix.lower() == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace", newline=None)
    return open(path, encoding="utf-8", errors="replace", newline=None)  # noqa: SIM115


def _smi_rows(lines: list[str], first: bool) -> list[tuple[str, str]]:
    rows = []
    for k, line in enumerate(lines):
        parts = line.strip().split(None, 1)
        if first and k == 0 and parts and parts[0].lower() == "smiles":
            continue  # a header line
        rows.append((parts[0] if parts else "", parts[1].strip() if len(parts) > 1 else ""))
    return rows


def read_smi_chunks(path: Path, chunk_size: int) -> Iterator[pd.DataFrame]:
    """Chunks of a ``.smi``/``.txt`` file as DataFrames with ``smiles`` and ``name``.

    Every line is a row (an empty line is a row with an empty SMILES, flagged later), except a
    first line starting with the word ``smiles``, read as a header.
    """
    with _open_text(path) as handle:
        for index in itertools.count():
            lines = list(itertools.islice(handle, chunk_size))
            if not lines:
                return
            rows = _smi_rows([line.rstrip("\r\n") for line in lines], index == 0)
            yield pd.DataFrame(rows, columns=["smiles", "name"], dtype=object)


def find_smiles_column(columns: list[str], wanted: str) -> str:
    """``wanted``, or the one column equal to it ignoring case and spaces.

    Raises:
        InputError: No such column; lists the columns there are.
    """
    if wanted in columns:
        return wanted
    matches = [c for c in columns if str(c).strip().lower() == wanted.strip().lower()]
    if len(matches) == 1:
        return matches[0]
    raise InputError(f"no SMILES column {wanted!r} in the input; its columns are {columns} "
                     "(choose one with --smiles-column)")


def read_table_chunks(path: Path, sep: str, chunk_size: int) -> Iterator[pd.DataFrame]:
    """Chunks of a CSV/TSV file, every cell as text (empty cells stay ``''``)."""
    try:
        yield from pd.read_csv(path, sep=sep, dtype=str, keep_default_na=False,
                               na_filter=False, chunksize=chunk_size, compression="infer",
                               encoding="utf-8", encoding_errors="replace")
    except pd.errors.EmptyDataError:
        raise InputError(f"{path} is empty: a CSV/TSV input needs a header line") from None
    except pd.errors.ParserError as e:
        raise InputError(f"{path}: cannot parse: {e}") from None


def read_chunks(path: Path, smiles_column: str = "smiles", chunk_size: int = 4096
                ) -> tuple[str, Iterator[pd.DataFrame]]:
    """The SMILES column's name and an iterator of DataFrame chunks of the input.

    Raises:
        InputError: Missing file, unknown type, or no such SMILES column (checked up front).
    """
    if not path.is_file():
        raise InputError(f"input file not found: {path}")
    kind = input_kind(path)
    if kind == "smi":
        return "smiles", read_smi_chunks(path, chunk_size)
    chunks = read_table_chunks(path, "\t" if kind == "tsv" else ",", chunk_size)
    first = next(chunks, None)
    if first is None:
        return smiles_column, iter(())
    column = find_smiles_column(list(first.columns), smiles_column)
    return column, itertools.chain([first], chunks)


def unique_names(taken: list[str], wanted: list[str]) -> list[str]:
    """``wanted`` names, each suffixed with ``_pred`` until it clashes with nothing taken."""
    used, out = set(taken), []
    for name in wanted:
        while name in used:
            name += "_pred"
        used.add(name)
        out.append(name)
    return out


def _open_exclusive(path: Path, overwrite: bool) -> IO[bytes]:
    try:
        return open(path, "wb" if overwrite else "xb")  # noqa: SIM115
    except FileExistsError:
        raise InputError(f"{path} exists; pass --overwrite to replace it") from None
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror}") from None


class TableWriter:
    """Writes DataFrame chunks to CSV (TSV, gzip by name) as they come; header once."""

    def __init__(self, path: Path, overwrite: bool = False) -> None:
        self.path = path
        self.sep = "\t" if _base_suffix(path) == ".tsv" else ","
        raw = _open_exclusive(path, overwrite)
        binary: IO[bytes] = gzip.GzipFile(fileobj=raw, mode="wb") if path.suffix == ".gz" else raw
        self._raw = raw
        self._text = io.TextIOWrapper(binary, encoding="utf-8", newline="")
        self._header = True

    def write(self, frame: pd.DataFrame) -> None:
        """Appends ``frame`` (with the header before the first chunk) and flushes."""
        frame.to_csv(self._text, sep=self.sep, index=False, header=self._header)
        self._header = False
        self._text.flush()

    def close(self) -> None:
        """Flushes and closes the file."""
        self._text.close()
        self._raw.close()


class EmbeddingWriter:
    """Streams ``[n, D]`` float32 rows into a ``.npy`` file (shape written at the end)."""

    def __init__(self, path: Path, dim: int, overwrite: bool = False) -> None:
        self.path, self.dim, self.rows = path, dim, 0
        _open_exclusive(path, overwrite).close()  # claims the name now, fails early
        self._partial = path.with_name(f".{path.name}.partial")
        self._handle = open(self._partial, "wb")  # noqa: SIM115

    def write(self, rows: np.ndarray) -> None:
        """Appends rows."""
        self._handle.write(np.ascontiguousarray(rows, dtype="<f4").tobytes())
        self.rows += len(rows)

    def close(self) -> None:
        """Writes the ``.npy`` header and the rows to ``path``; removes the partial file."""
        self._handle.close()
        header = {"descr": "<f4", "fortran_order": False, "shape": (self.rows, self.dim)}
        with open(self.path, "wb") as out, open(self._partial, "rb") as rows:
            np.lib.format.write_array_header_1_0(out, header)
            shutil.copyfileobj(rows, out)
        os.remove(self._partial)
