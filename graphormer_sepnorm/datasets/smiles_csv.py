"""A user's own molecules: a CSV/TSV table (optionally gzipped) of SMILES and labels."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any, Literal

import torch
from torch_geometric.data import Data

from graphormer_sepnorm.chem.featurizers import build_featurizer
from graphormer_sepnorm.datasets.base import DataError, GraphDataModule, make_dataset_info
from graphormer_sepnorm.datasets.csv_table import NUMBERING, CSVTable, TaskType, read_table, report
from graphormer_sepnorm.datasets.feature_cache import featurize_cached
from graphormer_sepnorm.datasets.splits import (
    fold_split,
    murcko_scaffold,
    random_split,
    scaffold_split,
)

__all__ = ["SmilesCSVDataModule"]

Split = Literal["auto", "random", "scaffold", "column", "random_folds", "scaffold_folds"]
SPLITS = ("auto", "random", "scaffold", "column", "random_folds", "scaffold_folds")


class SmilesCSVDataModule(GraphDataModule):
    """Molecules from a CSV file: a SMILES column, label columns, optional descriptor columns.

    The file is read with Python's ``csv`` module (quoted fields may hold commas; ``.tsv`` is
    tab-separated; ``.gz`` is decompressed) and checked row by row
    (:mod:`~graphormer_sepnorm.datasets.csv_table`): problems are listed with their file line.
    It is featurized once by the featurizer the checkpoint records for prediction; only graphs
    are kept. Labels may be sparse: an empty cell is a missing label (the loss and metrics skip
    it); a row with no label at all is reported and left out; a label column with no label in
    the training split is an error.

    Splits (:mod:`~graphormer_sepnorm.datasets.splits`): ``'auto'`` (default) reads the
    ``split_column`` when the file has one, else makes a scaffold split. ``'scaffold'`` groups
    Bemis-Murcko scaffolds, largest first, into train, then val, then test (ties hashed from
    ``split_seed``); ``'random'`` is a permutation seeded by ``split_seed``; ``'column'`` reads
    ``split_column`` (train, val or valid, test). ``'random_folds'`` and ``'scaffold_folds'``
    cut the molecules into ``num_folds`` folds (random, or whole scaffolds): fold ``fold`` is
    the test split, the next one validation, the rest training. The fit's first lines say which
    split was made and its sizes.

    Args:
        path: the CSV (``.csv``, ``.tsv``, optionally ``.gz``).
        target_columns: label column header(s); a single string is one column.
        smiles_column: SMILES column header. Default: ``'smiles'``.
        task: ``'regression'`` (numbers), ``'binary'`` (0/1) or ``'multiclass'`` (class
            indices 0..K-1). Its loss, metrics, checkpoint monitor and uncertainty follow.
        num_classes: ``K`` of a multiclass task; ``None``: the largest label + 1.
        featurizer: ``'ogb'`` (9 atom, 3 bond features) or ``'zinc'`` (ZINC's atom tokens).
        mol_features: molecule features the head reads beside the graph token, computed by the
            featurizer (:mod:`~graphormer_sepnorm.chem.mol_features`): ``'rdkit2d'`` (174
            standardized RDKit 2D descriptors), ``'morgan'`` (Morgan counts, radius 2, 2,048
            bits). Default: none.
        feature_columns: the table's own descriptor columns, read beside those (a finite number
            in every row), standardized by the model with the training split's mean and
            standard deviation, and required by name at prediction. Default: none.
        max_atoms: larger molecules count as invalid SMILES; ``None`` for no limit.
        split: one of ``'auto'``, ``'scaffold'``, ``'random'``, ``'column'``,
            ``'random_folds'``, ``'scaffold_folds'``.
        split_column: header of the split column. Default: ``'split'``.
        split_sizes: train, val, test shares of scaffold and random splits (sum 1).
        split_seed: seed of the random split, the folds and the scaffold split's ties.
        scaffold_ties: ``'hashed'`` (by ``split_seed``) or ``'file_order'`` (OGB's and
            chemprop's deterministic split).
        num_folds: folds of a ``*_folds`` split (at least 3). Default: 5.
        fold: the fold tested (``0 .. num_folds - 1``). Default: 0.
        on_invalid: ``'error'`` or ``'skip'`` rows with a SMILES that cannot be featurized.
        cache_dir: a folder keeping the featurized molecules for the next fit on the same file
            (:mod:`~graphormer_sepnorm.datasets.feature_cache`); ``None`` (default): none.
        **kwargs: see :class:`~graphormer_sepnorm.datasets.base.GraphDataModule` (``root`` is
            unused: nothing is cached on disk).
    """

    def __init__(self, path: str, target_columns: list[str] | str, smiles_column: str = "smiles",
                 task: TaskType = "regression", num_classes: int | None = None,
                 featurizer: str = "ogb", max_atoms: int | None = None,
                 mol_features: list[str] | None = None,
                 feature_columns: list[str] | None = None, split: Split = "auto",
                 split_column: str = "split",
                 split_sizes: tuple[float, float, float] = (0.8, 0.1, 0.1), split_seed: int = 0,
                 scaffold_ties: Literal["hashed", "file_order"] = "hashed", num_folds: int = 5,
                 fold: int = 0, on_invalid: Literal["error", "skip"] = "error",
                 cache_dir: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.save_hyperparameters()  # plain values in checkpoints: test/predict need no config
        columns = [target_columns] if isinstance(target_columns, str) else list(target_columns)
        _check_choice("task", task, ("regression", "binary", "multiclass"))
        _check_choice("split", split, SPLITS)
        _check_choice("on_invalid", on_invalid, ("error", "skip"))
        _check_choice("scaffold_ties", scaffold_ties, ("hashed", "file_order"))
        if not columns:
            raise ValueError("target_columns needs at least one column")
        if len(split_sizes) != 3 or min(split_sizes) < 0 or abs(sum(split_sizes) - 1) > 1e-6:
            raise ValueError(f"split_sizes must be 3 non-negative shares summing to 1, got "
                             f"{split_sizes}")
        if num_classes is not None and (task != "multiclass" or num_classes < 2):
            raise ValueError("num_classes is for multiclass tasks, and at least 2")
        if split.endswith("_folds"):
            fold_split(0, num_folds, fold, 0)  # checks them
        self.path, self.target_columns, self.smiles_column = path, columns, smiles_column
        self.task, self.num_classes = task, num_classes
        self.feature_columns = list(feature_columns or [])
        self.split, self.split_column, self.split_seed = split, split_column, split_seed
        self.split_sizes = tuple(float(s) for s in split_sizes)
        self.scaffold_ties, self.num_folds, self.fold = scaffold_ties, num_folds, fold
        self.on_invalid, self.cache_dir = on_invalid, cache_dir
        self.featurizer = build_featurizer(featurizer, max_atoms=max_atoms,
                                           mol_features=mol_features or [])
        self._table: CSVTable | None = None

    @property
    def dataset_info(self) -> dict[str, Any]:
        """The file's stem as name, the task, label columns, feature dims, featurizer."""
        name = Path(self.path).name.split(".")[0]
        classes = None
        if self.task == "multiclass":
            classes = self.num_classes or _largest_label(self.table()) + 1
        return make_dataset_info(name, self.task, self.target_columns, self.featurizer,
                                 classes, self.feature_columns)

    def table(self) -> CSVTable:
        """The file's rows, read and checked once."""
        if self._table is None:
            path = Path(self.path)
            if not path.is_file():
                raise DataError(f"CSV file not found: {path} (moved? pass its location with "
                                "--data.path, e.g. --data.path molecules.csv)")
            self._table = read_table(path, self.smiles_column, self.target_columns, self.task,
                                     self.split_column, self.feature_columns, self.num_classes,
                                     split_required=self.split == "column")
        return self._table

    def _featurize(self, table: CSVTable, rows: list[int]) -> list[Data | None]:
        """The graphs of ``rows`` with ``y`` (and descriptors in ``mol_x``); ``None`` if invalid."""
        graphs, errors = featurize_cached([table.smiles[i] for i in rows], self.featurizer,
                                          self.cache_dir)
        bad = [f"line {table.lines[i]}: {table.smiles[i]!r}: {e}"
               for i, e in zip(rows, errors, strict=True) if e is not None]
        if bad:
            message = (f"{self.path}: {len(bad)} of {len(rows)} SMILES in column "
                       f"'{self.smiles_column}' cannot be featurized ({NUMBERING}):\n"
                       f"{report(bad)}")
            if self.on_invalid == "error":
                raise DataError(f"{message}\nFix or remove these rows, or pass "
                                "on_invalid='skip' (--data.on_invalid skip) to drop them.")
            warnings.warn(f"{message}\nThese rows are skipped.", stacklevel=2)
        for graph, i in zip(graphs, rows, strict=True):
            if graph is None:
                continue
            graph.y = torch.tensor([table.targets[i]], dtype=torch.float32)
            if self.feature_columns:
                own = torch.tensor([table.features[i]], dtype=torch.float32)
                mol_x = getattr(graph, "mol_x", None)
                graph.mol_x = own if mol_x is None else torch.cat([mol_x, own], 1)
        return graphs

    def _split(self, table: CSVTable, keep: list[int]) -> tuple[list[list[int]], str]:
        """Indices into ``keep`` of train, val and test, and the split in words."""
        split = self.split
        if split == "auto":
            split = "column" if table.splits else "scaffold"
        if split == "column":
            return [[j for j, i in enumerate(keep) if table.splits[i] == name]
                    for name in ("train", "val", "test")], f"column '{self.split_column}'"
        seed = self.split_seed if self.scaffold_ties == "hashed" else None
        scaffolds = ([murcko_scaffold(table.smiles[i].strip()) for i in keep]
                     if split.startswith("scaffold") else None)
        if split.endswith("_folds"):
            parts = fold_split(len(keep), self.num_folds, self.fold, self.split_seed, scaffolds)
            return parts, f"{split}: fold {self.fold} of {self.num_folds} (seed {self.split_seed})"
        shares = "/".join(f"{s:g}" for s in self.split_sizes)
        if split == "random":
            return random_split(len(keep), self.split_sizes, self.split_seed), \
                f"random {shares} (seed {self.split_seed})"
        ties = "in file order" if seed is None else f"seed {seed}"
        return scaffold_split(scaffolds, self.split_sizes, seed), f"scaffold {shares} (ties {ties})"

    def load_splits(self) -> dict[str, list[Data]]:
        """Reads, checks and featurizes the file, then splits it; says what it made."""
        table = self.table()
        labelled = [i for i, t in enumerate(table.targets) if not all(map(math.isnan, t))]
        if len(labelled) < len(table.targets):
            unlabelled = [f"line {table.lines[i]}" for i, t in enumerate(table.targets)
                          if all(map(math.isnan, t))]
            warnings.warn(f"{self.path}: {len(unlabelled)} row(s) have no label in any of "
                          f"{self.target_columns} and are left out ({NUMBERING}):\n"
                          f"{report(unlabelled)}", stacklevel=2)
        graphs = self._featurize(table, labelled)
        keep = [i for i, g in zip(labelled, graphs, strict=True) if g is not None]
        by_row = dict(zip(labelled, graphs, strict=True))
        parts, how = self._split(table, keep)
        splits = {name: [by_row[keep[j]] for j in part]
                  for name, part in zip(("train", "val", "test"), parts, strict=True)}
        self._say(how, splits, self._check_labels(splits))
        return splits

    def _check_labels(self, splits: dict[str, list[Data]]) -> list[int]:
        """Each target's number of training labels, after checking that none is 0."""
        if not splits["train"]:
            raise DataError(f"{self.path}: the training split is empty")
        counts = (~torch.cat([g.y for g in splits["train"]]).isnan()).sum(0).tolist()
        empty = [c for c, n in zip(self.target_columns, counts, strict=True) if n == 0]
        if empty:
            raise DataError(f"{self.path}: no label in the training split for column(s) "
                            f"{empty}: a model cannot learn them (remove the column, or add "
                            "labelled rows to the training split)")
        for name in ("val", "test"):
            if not splits[name]:
                warnings.warn(f"{self.path}: the {name} split is empty", stacklevel=2)
        return counts

    def _say(self, how: str, splits: dict[str, list[Data]], labels: list[int]) -> None:
        """Prints the split, its sizes and each target's training labels (on process 0)."""
        if self.trainer is not None and not self.trainer.is_global_zero:
            return
        sizes = ", ".join(f"{name} {len(graphs):,}" for name, graphs in splits.items())
        counts = ", ".join(f"{c} {n:,}" for c, n in zip(self.target_columns, labels, strict=True))
        print(f"data: {self.path}: split {how}: {sizes} molecules; training labels: {counts}",
              flush=True)


def _largest_label(table: CSVTable) -> int:
    labels = [v for row in table.targets for v in row if not math.isnan(v)]
    return int(max(labels)) if labels else 0


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    """Raises a ValueError naming the choices when ``value`` is not one of them."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}; got {value!r}")
