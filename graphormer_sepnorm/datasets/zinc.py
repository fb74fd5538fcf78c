"""ZINC and ZINC-subset (penalized logP regression) from ``torch_geometric.datasets.ZINC``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch_geometric.data import Data
from torch_geometric.datasets import ZINC

from graphormer_sepnorm.datasets.base import GraphDataModule, make_dataset_info
from graphormer_sepnorm.datasets.mirror import prepare_raw, unavailable

ZINC_RAW_FILES = ("train.pickle", "val.pickle", "test.pickle", "train.index", "val.index",
                  "test.index", "atom_dict.pickle", "bond_dict.pickle")
ZINC_TARGET = "penalized_logp"


class ZINCDataModule(GraphDataModule):
    """The ZINC benchmark (Dwivedi et al.): 250k molecules, or the 12k ZINC-subset.

    Graphs come from ``torch_geometric.datasets.ZINC`` under ``ROOT/ZINC`` (28 atom types, 3
    bond types, target: normalized penalized logP). Raw files missing there are copied from the
    mirror (``MIRROR/ZINC/raw``) when one is set, else PyG downloads them.

    Args:
        subset: the 10k/1k/1k ZINC-subset (true) or the full 220k/24k/5k ZINC. Default: true.
        mirror: offline mirror folder; default ``$GRAPHORMER_SEPNORM_DATA_MIRROR``.
        **kwargs: see :class:`~graphormer_sepnorm.datasets.base.GraphDataModule`.
    """

    def __init__(self, subset: bool = True, mirror: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.subset = subset
        self.save_hyperparameters()  # plain values in checkpoints: test/predict need no config
        self.mirror = mirror

    @property
    def dataset_info(self) -> dict[str, Any]:
        """Regression of ``penalized_logp`` on ZINC's 28 atom and 4 bond types."""
        from graphormer_sepnorm.chem.featurizers import ZincFeaturizer

        return make_dataset_info("zinc_subset" if self.subset else "zinc", "regression",
                                 [ZINC_TARGET], ZincFeaturizer())

    def prepare_data(self) -> None:
        """Fetches raw files (mirror or download) and lets PyG process all three splits."""
        folder = Path(self.root) / "ZINC"
        have = prepare_raw(self.mirror, "ZINC/raw", folder / "raw", ZINC_RAW_FILES)
        try:
            ZINC(str(folder), subset=self.subset, split="train")
        except Exception as exc:
            if have:
                raise
            raise unavailable("ZINC", folder / "raw", "ZINC/raw", ZINC_RAW_FILES, exc) from exc

    def load_splits(self) -> dict[str, list[Data]]:
        """The processed graphs of each split, as lists."""
        self.prepare_data()
        folder = str(Path(self.root) / "ZINC")
        splits = {}
        for name in ("train", "val", "test"):
            dataset = ZINC(folder, subset=self.subset, split=name)
            splits[name] = [dataset[i] for i in range(len(dataset))]
        return splits
