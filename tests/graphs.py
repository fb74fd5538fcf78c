"""Hand-built and random test graphs in the PyG format the package consumes."""

from __future__ import annotations

import networkx as nx
import torch
from torch_geometric.data import Data

ATOM_DIMS = [5, 3]
BOND_DIMS = [4, 2]


def from_networkx(graph: nx.Graph, seed: int = 0, y: float | None = None) -> Data:
    """A PyG graph with both directions of each edge and random small integer features."""
    gen = torch.Generator().manual_seed(seed)
    n = graph.number_of_nodes()
    edges = sorted(graph.edges())
    pairs = [(u, v) for u, v in edges] + [(v, u) for u, v in edges]
    edge_index = torch.tensor(pairs, dtype=torch.long).reshape(-1, 2).t().contiguous()
    bond = torch.stack([torch.randint(0, d, (len(edges),), generator=gen) for d in BOND_DIMS], 1)
    data = Data(
        x=torch.stack([torch.randint(0, d, (n,), generator=gen) for d in ATOM_DIMS], 1),
        edge_index=edge_index,
        edge_attr=torch.cat([bond, bond]),  # the same features in both directions
        num_nodes=n,
    )
    if y is not None:
        data.y = torch.tensor([y])
    return data


def random_graph(n: int, seed: int, p: float = 0.15, y: float | None = None) -> Data:
    """A random graph (possibly disconnected) with ``n`` nodes."""
    return from_networkx(nx.gnp_random_graph(n, p, seed=seed), seed, y)


def random_tree(n: int, seed: int) -> nx.Graph:
    """A random labelled tree: every pair has exactly one shortest path."""
    gen = torch.Generator().manual_seed(seed)
    graph = nx.empty_graph(n)
    for v in range(1, n):
        graph.add_edge(int(torch.randint(0, v, (1,), generator=gen)), v)
    return graph


def to_networkx(data: Data) -> nx.Graph:
    """The undirected networkx graph of ``data``."""
    graph = nx.empty_graph(data.num_nodes)
    graph.add_edges_from(data.edge_index.t().tolist())
    return graph
