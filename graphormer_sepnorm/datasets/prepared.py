r"""Featurized splits as compact arrays, for machines without RDKit, ogb or the raw data.

:func:`write_prepared` stores a datamodule's splits as ``{train,val,test}.npz`` (ZINC-subset's:
0.5 MB, against 347 MB of raw pickles) and its ``dataset_info.json``; :class:`PreparedDataModule`
trains from them with torch and PyG alone, and its checkpoints predict on SMILES like any other::

    python -m graphormer_sepnorm.datasets.prepared zinc_subset data/prepared/zinc_subset
    graphormer-sepnorm fit --config configs/zinc_subset.yaml --data.path data/prepared/zinc_subset \
        --data graphormer_sepnorm.datasets.PreparedDataModule
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data

from graphormer_sepnorm.datasets.base import SPLITS, GraphDataModule


def save_graphs(path: Path, graphs: Sequence[Data]) -> None:
    """Compact arrays of ``graphs`` (features int16/int8, concatenated) in one ``.npz``.

    Molecule features (``mol_x``), when the graphs have them, are kept as float32 ``[G, F]``.
    """
    extra = ({"mol_x": torch.cat([g.mol_x.reshape(1, -1) for g in graphs]).numpy()}
             if graphs and getattr(graphs[0], "mol_x", None) is not None else {})
    np.savez_compressed(
        path, **extra, atoms=np.array([g.num_nodes for g in graphs]),
        edges=np.array([g.edge_index.shape[1] for g in graphs]),
        x=torch.cat([g.x.reshape(g.num_nodes, -1) for g in graphs]).numpy().astype(np.int16),
        edge_index=torch.cat([g.edge_index for g in graphs], 1).numpy().astype(np.int16),
        edge_attr=torch.cat([g.edge_attr.reshape(g.edge_index.shape[1], -1) for g in graphs]
                            ).numpy().astype(np.int8),
        y=torch.cat([g.y.reshape(1, -1) for g in graphs]).numpy().astype(np.float32))


def load_graphs(path: Path) -> list[Data]:
    """The graphs :func:`save_graphs` wrote (long features, float targets ``[1, T]``)."""
    arrays = np.load(path)
    atoms, edges = arrays["atoms"], arrays["edges"]
    x = np.split(arrays["x"].astype(np.int64), np.cumsum(atoms)[:-1])
    ei = np.split(arrays["edge_index"].astype(np.int64), np.cumsum(edges)[:-1], axis=1)
    ea = np.split(arrays["edge_attr"].astype(np.int64), np.cumsum(edges)[:-1])
    graphs = [Data(x=torch.from_numpy(a), edge_index=torch.from_numpy(e),
                   edge_attr=torch.from_numpy(b), y=torch.from_numpy(y).reshape(1, -1),
                   num_nodes=int(n))
              for a, e, b, y, n in zip(x, ei, ea, arrays["y"], atoms, strict=True)]
    if "mol_x" in arrays:
        for graph, row in zip(graphs, arrays["mol_x"], strict=True):
            graph.mol_x = torch.from_numpy(row).reshape(1, -1)
    return graphs


def write_prepared(datamodule: GraphDataModule, folder: str | Path) -> Path:
    """Writes ``datamodule``'s splits and ``dataset_info`` to ``folder``; returns it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    datamodule.prepare_data()
    datamodule.setup("fit")
    for split in SPLITS:
        save_graphs(folder / f"{split}.npz", datamodule.splits[split])
    (folder / "dataset_info.json").write_text(json.dumps(datamodule.dataset_info, indent=1))
    return folder


class PreparedDataModule(GraphDataModule):
    """Splits written by :func:`write_prepared`.

    ``PATH/{train,val,test}.npz`` and ``PATH/dataset_info.json``.

    Args:
        path: the folder.
        **kwargs: see :class:`~graphormer_sepnorm.datasets.base.GraphDataModule` (``root`` is
            unused).
    """

    def __init__(self, path: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.save_hyperparameters()

    @property
    def dataset_info(self) -> dict[str, Any]:
        """The original datamodule's, as written."""
        return json.loads((Path(self.path) / "dataset_info.json").read_text())

    def load_splits(self) -> dict[str, list[Data]]:
        """The three splits' graphs."""
        return {split: load_graphs(Path(self.path) / f"{split}.npz") for split in SPLITS}


def main(argv: list[str] | None = None) -> None:
    """``python -m graphormer_sepnorm.datasets.prepared {zinc_subset,zinc,molhiv} FOLDER``."""
    from graphormer_sepnorm.datasets import MolHIVDataModule, ZINCDataModule

    parser = argparse.ArgumentParser(description="Writes a dataset's featurized splits.")
    parser.add_argument("dataset", choices=["zinc_subset", "zinc", "molhiv"])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--root", default="data", help="the datamodule's data root")
    args = parser.parse_args(argv)
    module = (MolHIVDataModule(root=args.root) if args.dataset == "molhiv"
              else ZINCDataModule(subset=args.dataset == "zinc_subset", root=args.root))
    print(f"wrote {write_prepared(module, args.folder)}")


if __name__ == "__main__":
    main()
