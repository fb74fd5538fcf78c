"""Tiny datasets in the real on-disk formats: PyG ZINC raw pickles, OGB's molhiv layout, a CSV."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import numpy as np
import torch
from ogb.utils import smiles2graph

from graphormer_sepnorm.chem.featurizers import ZincFeaturizer, featurize_many
from graphormer_sepnorm.data import add_shortest_paths

SMILES = [
    "CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "C1CCNCC1", "CC(C)Cc1ccc(C(C)C(=O)O)cc1",
    "O=C(O)c1ccccc1", "CCN(CC)CC", "c1ccncc1", "C#CCO", "CC[NH3+]", "Clc1ccc(Br)cc1",
    "CC(=O)OC1=CC=CC=C1C(=O)O", "C1=CC=C2C=CC=CC2=C1", "CCS(=O)(=O)N", "OC1CCCCC1",
    "CC1=CC(=O)C=CC1=O", "NC(=O)c1cccnc1", "CCOC(=O)C", "C[C@H](N)C(=O)O", "FC(F)(F)c1ccccc1",
]


def write_zinc_raw(raw: Path, sizes: tuple[int, int, int] = (12, 4, 4)) -> None:
    """Writes PyG ``ZINC`` raw files (pickles, subset index files, dictionaries) into ``raw``."""
    raw.mkdir(parents=True, exist_ok=True)
    featurizer = ZincFeaturizer()
    start = 0
    for split, count in zip(("train", "val", "test"), sizes, strict=True):
        mols = []
        for k, smiles in enumerate(SMILES[start:start + count] * 2):  # index selects the first
            g = featurizer(smiles)
            adj = torch.zeros(g.num_nodes, g.num_nodes, dtype=torch.uint8)
            adj[g.edge_index[0], g.edge_index[1]] = g.edge_attr[:, 0].to(torch.uint8)
            mols.append({"atom_type": g.x[:, 0].to(torch.uint8), "bond_type": adj,
                         "logP_SA_cycle_normalized": torch.tensor([0.1 * k - 0.5]),
                         "num_atom": g.num_nodes})
        (raw / f"{split}.pickle").write_bytes(pickle.dumps(mols))
        (raw / f"{split}.index").write_text(",".join(map(str, range(count))) + "\n")
        start += count
    for name in ("atom_dict.pickle", "bond_dict.pickle"):
        (raw / name).write_bytes(pickle.dumps({}))


def _write_gz(path: Path, rows: list[list]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.writelines(",".join(str(v) for v in row) + "\n" for row in rows)


def write_ogb_molhiv(folder: Path, split: tuple[int, int, int] = (12, 4, 4)) -> None:
    """Writes ``ogbg_molhiv`` in OGB's layout (one direction per bond, scaffold split files)."""
    graphs = [smiles2graph(s) for s in SMILES[: sum(split)]]
    labels = [[k % 2] for k in range(len(graphs))]
    edges, edge_feat, node_feat = [], [], []
    for g in graphs:
        keep = np.arange(0, g["edge_index"].shape[1], 2)  # smiles2graph stores both directions
        edges += g["edge_index"][:, keep].T.tolist()
        edge_feat += g["edge_feat"][keep].tolist()
        node_feat += g["node_feat"].tolist()
    _write_gz(folder / "raw/edge.csv.gz", edges)
    _write_gz(folder / "raw/edge-feat.csv.gz", edge_feat)
    _write_gz(folder / "raw/node-feat.csv.gz", node_feat)
    _write_gz(folder / "raw/graph-label.csv.gz", labels)
    _write_gz(folder / "raw/num-node-list.csv.gz", [[g["num_nodes"]] for g in graphs])
    _write_gz(folder / "raw/num-edge-list.csv.gz", [[g["edge_index"].shape[1] // 2]
                                                   for g in graphs])
    bounds = np.cumsum((0,) + split)
    for name, lo, hi in zip(("train", "valid", "test"), bounds[:-1], bounds[1:], strict=True):
        _write_gz(folder / f"split/scaffold/{name}.csv.gz", [[i] for i in range(lo, hi)])
    _write_gz(folder / "mapping/mol.csv.gz", [["HIV_active", "smiles", "mol_id"]]
              + [[y[0], s, ""] for y, s in zip(labels, SMILES, strict=False)])
    (folder / "RELEASE_v1.txt").write_text("tiny test copy\n")


def featurize_with_paths(smiles, featurizer):
    """PyG graphs with shortest paths (``None`` where flagged) and per-row errors (``''`` if
    fine): the plain path, a reference for the prediction pipeline's batches."""
    graphs, errors = featurize_many(smiles, featurizer)
    add_shortest_paths([g for g in graphs if g is not None])
    return graphs, [e or "" for e in errors]


def own_csv(path: Path, rows: int = 200, labels: tuple[str, ...] = ("train",) * 8 + ("val",
            "test")) -> Path:
    """Writes ``smiles,logS,split``: a numeric target a little related to the SMILES' length.

    Args:
        path: the CSV to write.
        rows: data rows, cycling through :data:`SMILES`.
        labels: the ``split`` column's values, cycled.

    Returns:
        ``path``.
    """
    gen = np.random.default_rng(0)
    lines = ["smiles,logS,split"]
    for k in range(rows):
        smiles = SMILES[k % len(SMILES)]
        lines.append(f"{smiles},{len(smiles) / 10 + gen.normal(0, 0.3):.3f},"
                     f"{labels[k % len(labels)]}")
    path.write_text("\n".join(lines) + "\n")
    return path
