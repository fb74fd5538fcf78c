import networkx as nx
import numpy as np
import pytest
from graphs import random_graph, to_networkx

from graphormer_sepnorm.data.shortest_paths import (
    UNREACHABLE,
    batched_shortest_paths,
    floyd_warshall,
    shortest_paths,
)


def reference(graph: nx.Graph) -> np.ndarray:
    n = graph.number_of_nodes()
    out = np.full((n, n), UNREACHABLE)
    for i, lengths in nx.all_pairs_shortest_path_length(graph):
        for j, d in lengths.items():
            out[i, j] = d
    return out


@pytest.mark.parametrize("seed", range(8))
def test_random_graphs_match_networkx(seed):
    data = random_graph(3 + 3 * seed, seed)
    assert (shortest_paths(data.edge_index.numpy(), data.num_nodes)
            == reference(to_networkx(data))).all()


def test_disconnected_pairs_are_unreachable():
    # 0-1-2 and 3-4: two fragments, like a salt
    edge_index = np.array([[0, 1, 1, 2, 3, 4], [1, 0, 2, 1, 4, 3]])
    dist = shortest_paths(edge_index, 5)
    assert dist.dtype == np.int16
    assert dist.tolist() == [
        [0, 1, 2, -1, -1],
        [1, 0, 1, -1, -1],
        [2, 1, 0, -1, -1],
        [-1, -1, -1, 0, 1],
        [-1, -1, -1, 1, 0],
    ]


def test_single_atom_and_no_edges():
    assert shortest_paths(np.zeros((2, 0), dtype=np.int64), 1).tolist() == [[0]]
    assert shortest_paths(np.zeros((2, 0), dtype=np.int64), 2).tolist() == [[0, -1], [-1, 0]]


def test_batched_equals_one_by_one_in_input_order():
    graphs = [random_graph(n, seed) for seed, n in enumerate([7, 3, 7, 12, 1, 3])]
    batched = batched_shortest_paths([g.edge_index.numpy() for g in graphs],
                                     [g.num_nodes for g in graphs])
    for g, dist in zip(graphs, batched, strict=True):
        assert (dist == shortest_paths(g.edge_index.numpy(), g.num_nodes)).all()


def test_floyd_warshall_long_chain():
    n = 60
    adj = np.zeros((1, n, n), dtype=bool)
    adj[0, np.arange(n - 1), np.arange(1, n)] = True
    adj[0, np.arange(1, n), np.arange(n - 1)] = True
    dist = floyd_warshall(adj)[0]
    assert dist[0, n - 1] == n - 1
    assert (dist == np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])).all()
