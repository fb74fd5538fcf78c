"""Reading SMILES files in chunks and writing predictions as they come.

Inputs: ``.csv``/``.tsv`` (every column kept, read as text, quoted fields as CSV has them) and
``.smi``/``.txt`` (a SMILES, then an optional name after whitespace: columns ``smiles`` and
``name``), each optionally ``.gz``. Outputs: CSV (TSV for a ``.tsv`` name; gzip for ``.gz``),
written to a temporary file beside the output and renamed to it only when complete;
an existing output is refused unless overwriting is asked for.
"""

from __future__ import annotations

import gzip
import io
import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TypeVar

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
            frame = pd.DataFrame(rows, columns=["smiles", "name"], dtype=object)
            # the file line of the chunk's first row (a header line is not a row)
            frame.attrs["first_line"] = index * chunk_size + 1 + len(lines) - len(rows)
            yield frame


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
    """Chunks of a CSV/TSV file, every cell as text (empty cells stay ``''``).

    Each chunk's ``attrs['first_line']`` is its first row's line in the file (the header is
    line 1; rows are taken one a line).
    """
    line = 2
    try:
        for frame in pd.read_csv(path, sep=sep, dtype=str, keep_default_na=False,
                                 na_filter=False, chunksize=chunk_size, compression="infer",
                                 encoding="utf-8", encoding_errors="replace"):
            frame.attrs["first_line"] = line
            line += len(frame)
            yield frame
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


def check_writable(path: Path, overwrite: bool) -> None:
    """Refuses an existing ``path`` unless ``overwrite``.

    Raises:
        InputError: ``path`` exists and ``overwrite`` is false.
    """
    if path.exists() and not overwrite:
        raise InputError(f"{path} exists; pass --overwrite to replace it")


def _temp_beside(path: Path) -> tuple[Path, IO[bytes]]:
    """A new hidden temporary file in ``path``'s folder (so that renaming it is atomic)."""
    try:
        handle = tempfile.NamedTemporaryFile(  # noqa: SIM115
            dir=path.parent, prefix=f".{path.name}.", suffix=".partial", delete=False)
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror}") from None
    return Path(handle.name), handle


def _publish(temp: Path, path: Path, overwrite: bool) -> None:
    """Renames the finished ``temp`` to ``path``; removes ``temp`` if that is refused."""
    try:
        check_writable(path, overwrite)  # it may have appeared while we wrote
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp, 0o666 & ~umask)  # as a plainly created file (temp files are 0600)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


_Output = TypeVar("_Output", bound="_OutputFile")


class _OutputFile:
    """A context manager that closes (publishes) on success and aborts on any exception."""

    def close(self) -> None:
        """Finishes the output and renames it into place."""
        raise NotImplementedError

    def abort(self) -> None:
        """Discards what was written."""
        raise NotImplementedError

    def __enter__(self: _Output) -> _Output:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()


class TableWriter(_OutputFile):
    """Writes DataFrame chunks to CSV (TSV, gzip by name) as they come; header once.

    Rows go to a hidden temporary file beside ``path``; :meth:`close` renames it to ``path``,
    :meth:`abort` removes it, so that a stopped run leaves no half-written output. As a context
    manager it closes on success and aborts on any exception (``KeyboardInterrupt`` included).
    """

    def __init__(self, path: Path, overwrite: bool = False) -> None:
        check_writable(path, overwrite)
        self.path, self.overwrite = path, overwrite
        self.sep = "\t" if _base_suffix(path) == ".tsv" else ","
        self.temp, raw = _temp_beside(path)
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
        """Finishes the file and renames it to ``path``."""
        self._text.close()
        self._raw.close()
        _publish(self.temp, self.path, self.overwrite)

    def abort(self) -> None:
        """Discards what was written; ``path`` is left as it was."""
        try:
            self._text.close()
            self._raw.close()
        finally:
            self.temp.unlink(missing_ok=True)


class EmbeddingWriter(_OutputFile):
    """Streams ``[n, D]`` float32 rows into a ``.npy`` file (shape written at the end).

    Like :class:`TableWriter`, nothing appears at ``path`` until :meth:`close`.
    """

    def __init__(self, path: Path, dim: int, overwrite: bool = False) -> None:
        check_writable(path, overwrite)
        self.path, self.dim, self.rows, self.overwrite = path, dim, 0, overwrite
        self._partial, self._handle = _temp_beside(path)

    def write(self, rows: np.ndarray) -> None:
        """Appends rows."""
        self._handle.write(np.ascontiguousarray(rows, dtype="<f4").tobytes())
        self.rows += len(rows)

    def close(self) -> None:
        """Writes the ``.npy`` header and the rows, then renames the file to ``path``."""
        self._handle.close()
        header = {"descr": "<f4", "fortran_order": False, "shape": (self.rows, self.dim)}
        final, out = _temp_beside(self.path)
        try:
            with out, open(self._partial, "rb") as rows:
                np.lib.format.write_array_header_1_0(out, header)
                shutil.copyfileobj(rows, out)
        except BaseException:
            final.unlink(missing_ok=True)
            raise
        finally:
            self._partial.unlink(missing_ok=True)
        _publish(final, self.path, self.overwrite)

    def abort(self) -> None:
        """Discards the rows; ``path`` is left as it was."""
        try:
            self._handle.close()
        finally:
            self._partial.unlink(missing_ok=True)
