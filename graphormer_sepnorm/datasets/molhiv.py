"""OGB ``ogbg-molhiv`` (HIV replication inhibition, binary) with its official scaffold split."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch_geometric.data import Data

from graphormer_sepnorm.datasets.base import GraphDataModule, make_dataset_info
from graphormer_sepnorm.datasets.mirror import DatasetUnavailableError, prepare_raw, unavailable

MOLHIV_FILES = (
    "RELEASE_v1.txt", "mapping/mol.csv.gz", "raw/edge.csv.gz", "raw/edge-feat.csv.gz",
    "raw/node-feat.csv.gz", "raw/graph-label.csv.gz", "raw/num-node-list.csv.gz",
    "raw/num-edge-list.csv.gz", "split/scaffold/train.csv.gz", "split/scaffold/valid.csv.gz",
    "split/scaffold/test.csv.gz",
)
MOLHIV_TARGET = "hiv_active"


def allow_pyg_globals() -> None:
    """Lets ``torch.load(weights_only=True)`` (torch >= 2.6) read ogb 1.3.6's processed file."""
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import GlobalStorage

    torch.serialization.add_safe_globals([Data, DataEdgeAttr, DataTensorAttr, GlobalStorage])


class MolHIVDataModule(GraphDataModule):
    """``ogbg-molhiv`` from ogb's ``PygGraphPropPredDataset``, official scaffold split.

    41,127 molecules (3.5% active), 9 atom and 3 bond feature columns. The dataset lives in
    ``ROOT/ogbg_molhiv``; when files are missing there they are copied from the mirror
    (``MIRROR/ogbg_molhiv``) if one is set, else ogb downloads them.

    Args:
        mirror: offline mirror folder; default ``$GRAPHORMER_SEPNORM_DATA_MIRROR``.
        **kwargs: see :class:`~graphormer_sepnorm.datasets.base.GraphDataModule`.
    """

    def __init__(self, mirror: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.mirror = mirror
        self.save_hyperparameters()  # plain values in checkpoints: test/predict need no config

    @property
    def dataset_info(self) -> dict[str, Any]:
        """Binary classification on OGB's atom and bond features."""
        from graphormer_sepnorm.chem.featurizers import OgbFeaturizer

        return make_dataset_info("ogbg-molhiv", "binary", [MOLHIV_TARGET], OgbFeaturizer())

    def _dataset(self):  # noqa: ANN202 (ogb has no type hints)
        from ogb.graphproppred import PygGraphPropPredDataset

        folder = Path(self.root) / "ogbg_molhiv"
        have = prepare_raw(self.mirror, "ogbg_molhiv", folder, MOLHIV_FILES)
        if folder.is_dir() and not (folder / "RELEASE_v1.txt").exists():
            # ogb would stop and ask on stdin whether to delete the folder.
            raise DatasetUnavailableError(
                f"{folder} exists but lacks RELEASE_v1.txt (an interrupted download?): delete "
                "it, or copy a complete ogbg_molhiv folder there")
        allow_pyg_globals()
        try:
            return PygGraphPropPredDataset(name="ogbg-molhiv", root=self.root)
        except Exception as exc:
            if have:
                raise
            raise unavailable("ogbg-molhiv", folder, "ogbg_molhiv", MOLHIV_FILES, exc) from exc

    def prepare_data(self) -> None:
        """Fetches (mirror or download) and processes the dataset once."""
        self._dataset()

    def load_splits(self) -> dict[str, list[Data]]:
        """The graphs of the official scaffold split, with float targets ``[1, 1]``."""
        dataset = self._dataset()
        index = dataset.get_idx_split()
        splits = {}
        for name, key in (("train", "train"), ("val", "valid"), ("test", "test")):
            graphs = [dataset[int(i)] for i in index[key]]
            for g in graphs:
                g.y = g.y.float()
            splits[name] = graphs
        return splits
