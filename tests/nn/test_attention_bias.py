import networkx as nx
import pytest
import torch
from graphs import ATOM_DIMS, BOND_DIMS, from_networkx, random_graph, random_tree

from graphormer_sepnorm.data import GraphormerCollator, add_shortest_paths
from graphormer_sepnorm.nn import AttentionBias, Graphormer, GraphormerConfig, set_backend


def forest_batch(max_hops):
    two_trees = nx.disjoint_union(random_tree(6, seed=1), random_tree(3, seed=2))
    graphs = [from_networkx(two_trees, seed=0), from_networkx(random_tree(4, seed=5), seed=1)]
    return graphs, GraphormerCollator(max_hops)(graphs)


def naive_bias(module: AttentionBias, graphs, n_max, encoding):
    """Per pair, with plain loops and networkx paths (unique on trees)."""
    heads = module.virtual_distance.shape[0]
    k_max = module.edge.multi_hop_max_dist
    emb, offsets = module.edge.edge_embedding.weight, module.edge.edge_embedding.offsets
    out = torch.zeros(len(graphs), heads, n_max + 1, n_max + 1)
    for b, data in enumerate(graphs):
        graph = nx.empty_graph(data.num_nodes)
        graph.add_edges_from(data.edge_index.t().tolist())
        edge_id = {tuple(e): k for k, e in enumerate(data.edge_index.t().tolist())}
        out[b, :, 0, :] += module.virtual_distance[:, None]
        out[b, :, 1:, 0] += module.virtual_distance[:, None]
        for i in range(data.num_nodes):
            for j in range(data.num_nodes):
                try:
                    nodes = nx.shortest_path(graph, i, j)
                    d = len(nodes) - 1
                except nx.NetworkXNoPath:
                    nodes, d = [], -1
                bucket = d if d >= 0 else module.spatial.max_distance + 1
                value = module.spatial.embedding.weight[bucket].clone()
                hops = list(zip(nodes, nodes[1:], strict=False))
                for k, (u, v) in enumerate(hops[:k_max]):
                    feats = data.edge_attr[edge_id[(u, v)]]
                    edge = emb[feats + offsets].mean(0)
                    if encoding == "multi_hop":
                        value += edge @ module.edge.hop_weight[k] / min(d, k_max)
                    elif d == 1:
                        value += edge
                out[b, :, 1 + i, 1 + j] = value
        out[b, :, :, 1 + data.num_nodes:] = float("-inf")
    return out


@pytest.mark.parametrize(("encoding", "max_hops"), [("multi_hop", 20), ("multi_hop", 2),
                                                     ("simple", 20)])
def test_bias_equals_naive_per_pair_loop(encoding, max_hops):
    graphs, batch = forest_batch(max_hops)
    module = AttentionBias(num_heads=3, edge_feature_dims=BOND_DIMS,
                           multi_hop_max_dist=max_hops, edge_encoding=encoding)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_()  # large values, so every term is visible
        bias = module(batch)
        expected = naive_bias(module, graphs, 9, encoding)
    assert bias.shape == (2, 3, 10, 10)
    torch.testing.assert_close(bias, expected)


def test_padded_keys_are_minus_infinity_and_no_nan_appears():
    graphs, batch = forest_batch(20)
    model = Graphormer(GraphormerConfig(tuple(ATOM_DIMS), tuple(BOND_DIMS), num_layers=2,
                                        hidden_dim=16, ffn_dim=16, num_heads=4))
    bias = model.attention_bias(batch)
    assert torch.isinf(bias[1, :, :, 5:]).all() and (bias[1, :, :, 5:] < 0).all()
    assert torch.isfinite(bias[1, :, :, :5]).all() and torch.isfinite(bias[0]).all()
    out = model(batch)
    out.sum().backward()
    assert torch.isfinite(out).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_attention_weights_sum_to_one_and_ignore_padding():
    graphs, batch = forest_batch(20)
    model = set_backend(Graphormer(GraphormerConfig(
        tuple(ATOM_DIMS), tuple(BOND_DIMS), num_layers=2, hidden_dim=16, ffn_dim=16,
        num_heads=4)), "auto").eval()
    tokens, weights = model.encode(batch, need_weights=True)
    assert len(weights) == 2 and weights[0].shape == (2, 4, 10, 10)
    torch.testing.assert_close(weights[0].sum(-1), torch.ones(2, 4, 10))
    assert (weights[0][1, :, :, 5:] == 0).all()
    # the explicit path equals SDPA, and the CPU backend used otherwise
    torch.testing.assert_close(tokens, model.encode(batch)[0], atol=1e-5, rtol=1e-5)


def test_hops_past_k_count_for_nothing():
    # a collator keeping 6 hops, a model reading 2: the model cuts without host syncs
    graphs = add_shortest_paths([random_graph(n, seed) for seed, n in enumerate([9, 14])])
    long, short = GraphormerCollator(6)(graphs), GraphormerCollator(2)(graphs)
    torch.manual_seed(0)
    module = AttentionBias(3, BOND_DIMS, multi_hop_max_dist=2)
    torch.testing.assert_close(module(long), module(short))
