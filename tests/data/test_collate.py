import networkx as nx
import pytest
import torch
from graphs import from_networkx, random_graph, random_tree, to_networkx

from graphormer_sepnorm.data import AddShortestPaths, GraphormerCollator, add_shortest_paths


def hops_by_pair(batch):
    """{pair index: [edge ids in hop order]} from the flat hop lists."""
    paths: dict[int, dict[int, int]] = {}
    for p, k, e in zip(batch.hop_pair.tolist(), batch.hop_index.tolist(),
                       batch.hop_edge.tolist(), strict=True):
        paths.setdefault(p, {})[k] = e
    return {p: [hops[k] for k in range(len(hops))] for p, hops in paths.items()}


def pair_of(batch, p):
    b, n = batch.node_mask.shape
    slot = int(batch.pair_slot[p])
    return slot // (n * n), (slot // n) % n, slot % n


@pytest.mark.parametrize("max_hops", [20, 2])
def test_hops_follow_a_shortest_path(max_hops):
    graphs = [random_graph(n, seed, p=0.25) for seed, n in enumerate([9, 4, 13, 1, 6])]
    add_shortest_paths(graphs)
    batch = GraphormerCollator(max_hops)(graphs)
    edge_ptr = torch.tensor([0] + [g.edge_index.shape[1] for g in graphs]).cumsum(0)
    paths = hops_by_pair(batch)
    checked = 0
    for p in range(len(batch.pair_spd)):
        g, i, j = pair_of(batch, p)
        lengths = dict(nx.single_source_shortest_path_length(to_networkx(graphs[g]), i))
        d = lengths.get(j, -1)
        assert batch.pair_spd[p] == d
        if d < 1:
            assert p not in paths
            continue
        edges = paths[p]
        assert len(edges) == min(d, max_hops)
        node = i
        for e in edges:  # a walk from i, one edge after the other, towards j
            src, dst = graphs[g].edge_index[:, e - edge_ptr[g]].tolist()
            assert src == node and lengths.get(dst) is not None
            node = dst
        if d <= max_hops:
            assert node == j
        checked += 1
    assert checked > 50


def test_tree_paths_equal_networkx_paths():
    # On a tree the shortest path is unique, so the edges must be exactly networkx's.
    tree = random_tree(15, seed=3)
    data = from_networkx(tree)
    batch = GraphormerCollator(20)([data])
    paths = hops_by_pair(batch)
    lookup = {tuple(e): k for k, e in enumerate(data.edge_index.t().tolist())}
    for p in range(len(batch.pair_spd)):
        _, i, j = pair_of(batch, p)
        nodes = nx.shortest_path(tree, i, j)
        expected = [lookup[(u, v)] for u, v in zip(nodes, nodes[1:], strict=False)]
        assert paths.get(p, []) == expected


def test_padding_slots_masks_and_degree():
    small, big = random_graph(3, 0, p=1.0), random_graph(5, 1, p=0.5, y=2.0)
    small.y = torch.tensor([1.0])
    batch = GraphormerCollator()([small, big])
    assert batch.num_graphs == 2
    assert batch.node_mask.tolist() == [[True] * 3 + [False] * 2, [True] * 5]
    assert batch.node_slot.tolist() == [0, 1, 2, 5, 6, 7, 8, 9]
    assert len(batch.pair_slot) == 9 + 25
    assert batch.pair_slot[:9].tolist() == [0, 1, 2, 5, 6, 7, 10, 11, 12]
    expected_degree = [d for g in (small, big) for _, d in sorted(to_networkx(g).degree())]
    assert batch.degree.tolist() == expected_degree
    assert batch.y.tolist() == [[1.0], [2.0]]
    assert batch.x.shape == (8, 2) and batch.edge_attr.shape[1] == 2


def test_spd_computed_on_the_fly_equals_cached():
    graphs = [random_graph(n, seed) for seed, n in enumerate([6, 8])]
    on_the_fly = GraphormerCollator()(graphs)
    assert not any("spd" in g for g in graphs)  # inputs are not modified
    cached = GraphormerCollator()([AddShortestPaths()(g.clone()) for g in graphs])
    for name in ("pair_spd", "hop_pair", "hop_index", "hop_edge", "degree"):
        assert torch.equal(getattr(on_the_fly, name), getattr(cached, name))


def test_one_dimensional_features_and_missing_targets():
    data = random_graph(4, 0, p=1.0)
    data.x, data.edge_attr = data.x[:, 0], data.edge_attr[:, 0]
    batch = GraphormerCollator()([data])
    assert batch.x.shape == (4, 1) and batch.edge_attr.shape == (12, 1)
    assert batch.y is None


def test_batch_moves_to_a_device():
    batch = GraphormerCollator()([random_graph(4, 0, y=1.0)])
    moved = batch.to("cpu")
    assert torch.equal(moved.x, batch.x) and moved.y is not None


def test_rejects_zero_hops():
    with pytest.raises(ValueError):
        GraphormerCollator(0)
