"""A user's own molecules: a CSV/TSV file (optionally gzipped) of SMILES and numeric targets."""

from __future__ import annotations

import csv
import gzip
import hashlib
import math
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

import numpy as np
import torch
from rdkit import rdBase
from rdkit.Chem.Scaffolds import MurckoScaffold
from torch_geometric.data import Data

from graphormer_sepnorm.chem.featurizers import build_featurizer
from graphormer_sepnorm.datasets.base import (
    GraphDataModule,
    make_dataset_info,
)
from graphormer_sepnorm.datasets.feature_cache import featurize_cached

SPLIT_VALUES = {"train": "train", "val": "val", "valid": "val", "validation": "val",
                "test": "test"}
MISSING = {"", "nan", "na", "n/a", "none", "null"}
SHOWN = 10
NUMBERING = "line numbers count the header as line 1"


def _report(problems: Sequence[str]) -> str:
    """The first :data:`SHOWN` problems, one per indented line, then how many more."""
    lines = [f"  {p}" for p in problems[:SHOWN]]
    if len(problems) > SHOWN:
        lines.append(f"  ... and {len(problems) - SHOWN} more")
    return "\n".join(lines)


def _open_text(path: Path) -> TextIO:
    """The file as text (gzip by the ``.gz`` suffix), a UTF-8 byte-order mark dropped."""
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8-sig", newline="")
    return open(path, encoding="utf-8-sig", newline="")


def _records(handle: TextIO, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """Non-blank records with the file line each starts on (quoted newlines counted)."""
    reader = csv.reader(handle, delimiter=delimiter)
    previous = 0
    for row in reader:
        start, previous = previous + 1, reader.line_num
        if any(cell.strip() for cell in row):
            yield start, row


@dataclass
class CSVTable:
    """The columns a :class:`SmilesCSVDataModule` reads, with each row's line in the file."""

    smiles: list[str] = field(default_factory=list)
    targets: list[list[float]] = field(default_factory=list)
    splits: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)


def _target(text: str, column: str, binary: bool) -> tuple[float, str | None]:
    """A target value, or NaN and what is wrong with it."""
    value = text.strip()
    if value.lower() in MISSING:
        return math.nan, (f"column '{column}' is empty" if not value
                          else f"column '{column}' is {text!r} (a missing value)")
    try:
        number = float(value)
    except ValueError:
        return math.nan, f"column '{column}' = {text!r} is not a number"
    if not math.isfinite(number):
        return math.nan, f"column '{column}' = {text!r} is not finite"
    if binary and number not in (0.0, 1.0):
        return math.nan, f"column '{column}' = {text!r}: binary targets must be 0 or 1"
    return number, None


def _parse_row(row: list[str], width: int, index: dict[str, int], targets: Sequence[str],
               split_column: str | None, binary: bool) -> tuple[list[float], str, list[str]]:
    """One record's targets and split (``''`` if unknown), with what is wrong with it."""
    errors = [f"has {len(row)} fields but the header has {width}"] if len(row) > width else []
    row = row + [""] * (width - len(row))
    values = [_target(row[index[c]], c, binary) for c in targets]
    errors += [e for _, e in values if e]
    label = row[index[split_column]].strip().lower() if split_column else "train"
    if label not in SPLIT_VALUES:
        errors.append(f"column '{split_column}' = {label!r} is not train, val, valid or test")
    return [v for v, _ in values], SPLIT_VALUES.get(label, ""), errors


def read_table(path: Path, smiles_column: str, target_columns: Sequence[str],
               split_column: str | None = None, binary: bool = False) -> CSVTable:
    """Reads SMILES, targets and (optionally) split labels, checking every row.

    Args:
        path: CSV file; tab-separated when the name ends in ``.tsv`` or ``.tsv.gz``.
        smiles_column: header of the SMILES column.
        target_columns: headers of the target columns.
        split_column: header of the split column (train/val/valid/test), or ``None``.
        binary: targets must be 0 or 1.

    Raises:
        ValueError: a column is missing (the available ones are listed), or rows have missing,
            NaN, non-numeric (or, for ``binary``, non-0/1) targets or unknown split labels.
    """
    delimiter = "\t" if ".tsv" in path.suffixes else ","
    wanted = [smiles_column, *target_columns] + ([split_column] if split_column else [])
    table, problems = CSVTable(), []
    with _open_text(path) as handle:
        records = _records(handle, delimiter)
        header = [h.strip() for h in next(records, (1, []))[1]]
        missing = [c for c in wanted if c not in header]
        if missing:
            raise ValueError(f"{path}: no column {', '.join(map(repr, missing))}; the header "
                             f"has {header}")
        index = {c: header.index(c) for c in wanted}
        for line, row in records:
            values, split, errors = _parse_row(row, len(header), index, target_columns,
                                               split_column, binary)
            problems += [f"line {line}: {e}" for e in errors]
            table.smiles.append(row[index[smiles_column]] if index[smiles_column] < len(row)
                                else "")
            table.targets.append(values)
            table.splits.append(split)
            table.lines.append(line)
    if problems:
        raise ValueError(f"{path}: {len(problems)} problem(s) in the data rows ({NUMBERING}):\n"
                         f"{_report(problems)}\nEvery row needs a finite number in each target "
                         "column; remove or fix these rows.")
    if not table.smiles:
        raise ValueError(f"{path} has a header but no data rows")
    return table


def murcko_scaffold(smiles: str) -> str:
    """Bemis-Murcko scaffold SMILES (no chirality); ``''`` for acyclic molecules."""
    with rdBase.BlockLogs():
        return MurckoScaffold.MurckoScaffoldSmiles(smiles=smiles, includeChirality=False)


def scaffold_split(scaffolds: Sequence[str], sizes: Sequence[float],
                   seed: int | None = 0) -> list[list[int]]:
    """Deterministic scaffold split, its ties in an order that does not depend on the file.

    Molecules are grouped by scaffold; groups, largest first, fill train up to its share, then
    validation, then test. A scaffold never spans two splits, so the shares are met only
    approximately. Groups of equal size (most are single molecules) are ordered by a hash of
    ``seed`` and the scaffold, not by where they appear in the file: files are often sorted (by
    activity, compound id, date), and file order would send the last rows' scaffolds to test
    (a set sorted by potency got a test split 2 pKi units more potent than its validation one).
    ``seed=None`` keeps file order for ties, as OGB's and chemprop's ``balanced=False`` split
    (and this package's first versions) do.

    Returns:
        Row indices of train, val and test.
    """
    groups: dict[str, list[int]] = {}
    for i, scaffold in enumerate(scaffolds):
        groups.setdefault(scaffold, []).append(i)
    n = len(scaffolds)
    train_cut, val_cut = sizes[0] * n, (sizes[0] + sizes[1]) * n
    out: list[list[int]] = [[], [], []]
    for scaffold in sorted(groups, key=lambda s: (-len(groups[s]), _tie_key(s, seed))):
        group = groups[scaffold]
        if len(out[0]) + len(group) <= train_cut:
            out[0] += group
        elif len(out[0]) + len(out[1]) + len(group) <= val_cut:
            out[1] += group
        else:
            out[2] += group
    return [sorted(indices) for indices in out]


def _tie_key(scaffold: str, seed: int | None) -> str:
    """Order of equal-sized scaffold groups: a seeded hash, or file order (``''``, stable sort)."""
    if seed is None:
        return ""
    return hashlib.sha256(f"{seed}:{scaffold}".encode()).hexdigest()


def random_split(n: int, sizes: Sequence[float], seed: int) -> list[list[int]]:
    """Seeded random split: ``round(share * n)`` rows for train and val, the rest for test."""
    order = np.random.default_rng(seed).permutation(n).tolist()
    n_train = round(sizes[0] * n)
    n_val = round((sizes[0] + sizes[1]) * n) - n_train
    parts = [order[:n_train], order[n_train:n_train + n_val], order[n_train + n_val:]]
    return [sorted(p) for p in parts]


class SmilesCSVDataModule(GraphDataModule):
    """Molecules from a CSV file: a SMILES column and one or more target columns.

    The file is read with Python's ``csv`` module (quoted fields may hold commas; ``.tsv`` is
    tab-separated; ``.gz`` is decompressed) and featurized once, in :meth:`load_splits`, by the
    same featurizer the checkpoint records for prediction (a large file with RDKit descriptors in
    worker processes: :func:`~graphormer_sepnorm.chem.parallel.featurize_set`). Only graphs are
    kept, never RDKit molecules. Problems are reported with their file line (the header is line 1):

    * a missing column names the columns the header has;
    * a missing, NaN, non-numeric or infinite target (or a binary one not 0/1), and an unknown
      split label, always raise a :class:`ValueError`;
    * a SMILES the featurizer refuses raises (``on_invalid='error'``) or is dropped with a
      warning (``'skip'``), both giving the featurizer's reason.

    Splits: ``'scaffold'`` groups Bemis-Murcko scaffolds (RDKit, without chirality) and fills
    train, then val, then test with the groups, largest first; groups of equal size in an order
    hashed from ``split_seed`` (:func:`scaffold_split`), so a file sorted by activity does not
    put its most (or least) active singletons in test. ``'random'`` is a permutation seeded by
    ``split_seed``. ``'column'`` reads ``split_column`` (train, val or valid, test).

    Args:
        path: the CSV (``.csv``, ``.tsv``, optionally ``.gz``).
        target_columns: target column header(s); a single string is one column.
        smiles_column: SMILES column header. Default: ``'smiles'``.
        task: ``'regression'`` (set ``model.standardize_targets``) or ``'binary'`` (0/1 targets).
        featurizer: ``'ogb'`` (9 atom, 3 bond features) or ``'zinc'`` (ZINC's atom tokens).
        mol_features: molecule features the head reads beside the graph token, computed by the
            featurizer and recorded with it in the checkpoint
            (:mod:`~graphormer_sepnorm.chem.mol_features`): ``'rdkit2d'`` (174 standardized RDKit
            2D descriptors, RDKit's own functions), ``'morgan'`` (Morgan counts, radius 2, 2,048
            bits). Default: none.
        max_atoms: larger molecules count as invalid SMILES; ``None`` for no limit.
        split: ``'scaffold'``, ``'random'`` or ``'column'``. Default: ``'scaffold'``.
        split_column: header of the split column for ``split='column'``. Default: ``'split'``.
        split_sizes: train, val, test shares for scaffold and random splits (sum 1).
        split_seed: seed of the random split and of the scaffold split's ties. Default: 0.
        scaffold_ties: ``'hashed'`` (by ``split_seed``) or ``'file_order'``: OGB's and
            chemprop's deterministic split, and this package's first one; checkpoints
            saved with that split record no ``scaffold_ties`` and are read back with it
            (:func:`~graphormer_sepnorm.training.from_checkpoint.checkpoint_data`), so their
            test split is the one they were fit beside. Default: ``'hashed'``.
        on_invalid: ``'error'`` or ``'skip'`` rows with a SMILES that cannot be featurized.
        cache_dir: a folder keeping the featurized molecules for the next fit on the same file
            (:mod:`~graphormer_sepnorm.datasets.feature_cache`); ``None`` (default): none.
        **kwargs: see :class:`~graphormer_sepnorm.datasets.base.GraphDataModule` (``root`` is
            unused: nothing is cached on disk).
    """

    def __init__(self, path: str, target_columns: list[str] | str, smiles_column: str = "smiles",
                 task: Literal["regression", "binary"] = "regression", featurizer: str = "ogb",
                 max_atoms: int | None = None, mol_features: list[str] | None = None,
                 split: Literal["random", "scaffold", "column"] = "scaffold",
                 split_column: str = "split",
                 split_sizes: tuple[float, float, float] = (0.8, 0.1, 0.1), split_seed: int = 0,
                 scaffold_ties: Literal["hashed", "file_order"] = "hashed",
                 on_invalid: Literal["error", "skip"] = "error", cache_dir: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.save_hyperparameters()  # plain values in checkpoints: test/predict need no config
        columns = [target_columns] if isinstance(target_columns, str) else list(target_columns)
        _check_choice("task", task, ("regression", "binary"))
        _check_choice("split", split, ("random", "scaffold", "column"))
        _check_choice("on_invalid", on_invalid, ("error", "skip"))
        _check_choice("scaffold_ties", scaffold_ties, ("hashed", "file_order"))
        if not columns:
            raise ValueError("target_columns needs at least one column")
        if len(split_sizes) != 3 or min(split_sizes) < 0 or abs(sum(split_sizes) - 1) > 1e-6:
            raise ValueError(f"split_sizes must be 3 non-negative shares summing to 1, got "
                             f"{split_sizes}")
        self.path = path
        self.target_columns = columns
        self.smiles_column, self.task, self.split, self.split_column = (
            smiles_column, task, split, split_column)
        self.split_sizes = tuple(float(s) for s in split_sizes)
        self.split_seed, self.on_invalid = split_seed, on_invalid
        self.scaffold_ties = scaffold_ties
        self.cache_dir = cache_dir
        self.featurizer = build_featurizer(featurizer, max_atoms=max_atoms,
                                           mol_features=mol_features or [])

    @property
    def dataset_info(self) -> dict[str, Any]:
        """The file's stem as name, the task, target columns, feature dims, featurizer."""
        name = Path(self.path).name.split(".")[0]
        return make_dataset_info(name, self.task, self.target_columns, self.featurizer)

    def _featurize(self, table: CSVTable, path: Path) -> list[Data | None]:
        """Every row's graph with its ``y`` (``None`` when invalid), raising or warning."""
        graphs, errors = featurize_cached(table.smiles, self.featurizer, self.cache_dir)
        bad = [f"line {table.lines[i]}: {table.smiles[i]!r}: {e}"
               for i, e in enumerate(errors) if e is not None]
        if bad:
            message = (f"{path}: {len(bad)} of {len(errors)} SMILES in column "
                       f"'{self.smiles_column}' cannot be featurized ({NUMBERING}):\n"
                       f"{_report(bad)}")
            if self.on_invalid == "error":
                raise ValueError(f"{message}\nFix or remove these rows, or pass "
                                 "on_invalid='skip' (--data.on_invalid skip) to drop them.")
            warnings.warn(f"{message}\nThese rows are skipped.", stacklevel=2)
        for graph, target in zip(graphs, table.targets, strict=True):
            if graph is not None:
                graph.y = torch.tensor([target], dtype=torch.float32)
        return graphs

    def _split(self, table: CSVTable, keep: list[int]) -> list[list[int]]:
        """Row indices (into ``table``) of train, val and test."""
        if self.split == "column":
            return [[i for i in keep if table.splits[i] == s] for s in ("train", "val", "test")]
        if self.split == "random":
            parts = random_split(len(keep), self.split_sizes, self.split_seed)
        else:
            scaffolds = [murcko_scaffold(table.smiles[i].strip()) for i in keep]
            seed = self.split_seed if self.scaffold_ties == "hashed" else None
            parts = scaffold_split(scaffolds, self.split_sizes, seed)
        return [[keep[j] for j in part] for part in parts]

    def load_splits(self) -> dict[str, list[Data]]:
        """Reads, checks and featurizes the file, then splits it."""
        path = Path(self.path)
        if not path.is_file():
            raise FileNotFoundError(f"CSV file not found: {path} (moved? pass its location with "
                                    "--data.path, e.g. --data.path molecules.csv)")
        split_column = self.split_column if self.split == "column" else None
        table = read_table(path, self.smiles_column, self.target_columns, split_column,
                           binary=self.task == "binary")
        graphs = self._featurize(table, path)
        keep = [i for i, g in enumerate(graphs) if g is not None]
        parts = self._split(table, keep)
        splits = {name: [graphs[i] for i in part]
                  for name, part in zip(("train", "val", "test"), parts, strict=True)}
        if not splits["train"]:
            raise ValueError(f"{path}: the training split is empty ({len(keep)} molecules)")
        for name in ("val", "test"):
            if not splits[name]:
                warnings.warn(f"{path}: the {name} split is empty", stacklevel=2)
        return splits


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    """Raises a ValueError naming the choices when ``value`` is not one of them."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}; got {value!r}")
