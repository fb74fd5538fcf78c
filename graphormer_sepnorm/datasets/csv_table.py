"""A user's table of SMILES, labels and descriptors, read and checked row by row.

Every problem names its file line (the header is line 1, quoted newlines counted), the same
numbering ``graphormer-sepnorm-predict`` uses. A label cell that is empty (or ``NA``, ``nan``,
``none``, ``null``) is a missing label: real assay tables are sparse, and the loss and metrics
skip such cells. A wrong label, a descriptor that is not a finite number, a missing column or an
unknown split label is an error (:class:`~graphormer_sepnorm.datasets.base.DataError`) that
lists the rows.
"""

from __future__ import annotations

import csv
import gzip
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TextIO

from graphormer_sepnorm.datasets.base import DataError

__all__ = ["MISSING", "NUMBERING", "CSVTable", "TaskType", "read_table", "report"]

TaskType = Literal["regression", "binary", "multiclass"]
SPLIT_VALUES = {"train": "train", "val": "val", "valid": "val", "validation": "val",
                "test": "test"}
#: Cell values read as a missing label.
MISSING = {"", "nan", "na", "n/a", "none", "null"}
SHOWN = 10
NUMBERING = "line numbers count the header as line 1"


def report(problems: Sequence[str]) -> str:
    """The first 10 problems, one per indented line, then how many more."""
    lines = [f"  {p}" for p in problems[:SHOWN]]
    if len(problems) > SHOWN:
        lines.append(f"  ... and {len(problems) - SHOWN} more")
    return "\n".join(lines)


def open_text(path: Path) -> TextIO:
    """The file as text (gzip by the ``.gz`` suffix), a UTF-8 byte-order mark dropped."""
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8-sig", newline="")
    return open(path, encoding="utf-8-sig", newline="")


def records(handle: TextIO, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """Non-blank records with the file line each starts on (quoted newlines counted)."""
    reader = csv.reader(handle, delimiter=delimiter)
    previous = 0
    for row in reader:
        start, previous = previous + 1, reader.line_num
        if any(cell.strip() for cell in row):
            yield start, row


@dataclass
class CSVTable:
    """The columns a :class:`~graphormer_sepnorm.datasets.smiles_csv.SmilesCSVDataModule` reads.

    Attributes:
        smiles: per row.
        targets: per row, one value per target column (NaN where missing; class indices for
            multiclass).
        features: per row, one value per descriptor column (empty without them).
        splits: per row, ``train``, ``val`` or ``test``; empty without a split column.
        lines: each row's line in the file.
        header: the file's columns.
    """

    smiles: list[str] = field(default_factory=list)
    targets: list[list[float]] = field(default_factory=list)
    features: list[list[float]] = field(default_factory=list)
    splits: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    header: list[str] = field(default_factory=list)


def label(text: str, column: str, task: TaskType,
          num_classes: int | None = None) -> tuple[float, str | None]:
    """A label (NaN when missing), and what is wrong with it."""
    value = text.strip()
    if value.lower() in MISSING:
        return math.nan, None
    number = _number(value)
    if number is None or not math.isfinite(number):
        return math.nan, f"column '{column}' = {text!r} is not a finite number"
    if task == "binary" and number not in (0.0, 1.0):
        return math.nan, f"column '{column}' = {text!r}: binary labels must be 0 or 1"
    if task == "multiclass":
        if number != int(number) or number < 0:
            return math.nan, (f"column '{column}' = {text!r}: multiclass labels must be class "
                              "indices 0, 1, ...")
        if num_classes is not None and number >= num_classes:
            return math.nan, (f"column '{column}' = {text!r}: out of range for "
                              f"num_classes {num_classes} (labels 0..{num_classes - 1})")
    return number, None


def descriptor(text: str, column: str) -> tuple[float, str | None]:
    """A descriptor value, and what is wrong with it (every row needs every descriptor)."""
    number = _number(text.strip())
    if number is None or not math.isfinite(number):
        return math.nan, (f"feature column '{column}' = {text!r} is not a finite number (every "
                          "row needs each descriptor)")
    return number, None


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def read_table(path: Path, smiles_column: str, target_columns: Sequence[str],
               task: TaskType = "regression", split_column: str | None = None,
               feature_columns: Sequence[str] = (), num_classes: int | None = None,
               split_required: bool = False) -> CSVTable:
    """Reads SMILES, labels, descriptors and split labels, checking every row.

    Args:
        path: CSV file; tab-separated when the name ends in ``.tsv`` or ``.tsv.gz``.
        smiles_column: header of the SMILES column.
        target_columns: headers of the label columns.
        task: what the labels must be: numbers, 0/1, or class indices.
        split_column: header of a split column (train/val/valid/test); read when present.
        feature_columns: headers of descriptor columns (finite numbers in every row).
        num_classes: multiclass labels must be below it (``None``: any index).
        split_required: a missing ``split_column`` is an error.

    Raises:
        DataError: a missing column (the header's are listed), or rows with wrong labels,
            descriptors or split labels (listed by line).
    """
    delimiter = "\t" if ".tsv" in path.suffixes else ","
    table, problems = CSVTable(), []
    with open_text(path) as handle:
        rows = records(handle, delimiter)
        table.header = [h.strip() for h in next(rows, (1, []))[1]]
        wanted = [smiles_column, *target_columns, *feature_columns]
        missing = [c for c in wanted + ([split_column] if split_required else [])
                   if c not in table.header]
        if missing:
            raise DataError(f"{path}: no column {', '.join(map(repr, missing))}; the header "
                            f"has {table.header}")
        if split_column in table.header:
            wanted.append(split_column)
        else:
            split_column = None
        index = {c: table.header.index(c) for c in wanted}
        for line, row in rows:
            errors = [f"has {len(row)} fields but the header has {len(table.header)}"] \
                if len(row) > len(table.header) else []
            row = row + [""] * (len(table.header) - len(row))
            labels = [label(row[index[c]], c, task, num_classes) for c in target_columns]
            features = [descriptor(row[index[c]], c) for c in feature_columns]
            errors += [e for _, e in labels + features if e]
            if split_column is not None:
                split = row[index[split_column]].strip().lower()
                if split not in SPLIT_VALUES:
                    errors.append(f"column '{split_column}' = {split!r} is not train, val, "
                                  "valid or test")
                table.splits.append(SPLIT_VALUES.get(split, ""))
            problems += [f"line {line}: {e}" for e in errors]
            table.smiles.append(row[index[smiles_column]])
            table.targets.append([v for v, _ in labels])
            table.features.append([v for v, _ in features])
            table.lines.append(line)
    if problems:
        raise DataError(f"{path}: {len(problems)} problem(s) in the data rows ({NUMBERING}):\n"
                        f"{report(problems)}\nFix or remove these rows (an empty label cell is a "
                        "missing label).")
    if not table.smiles:
        raise DataError(f"{path} has a header but no data rows")
    return table
