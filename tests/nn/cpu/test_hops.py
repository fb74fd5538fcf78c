"""Hop sums taken block by block equal the reference edge encoder's, values and gradients."""

import pytest
import torch
from graphs import BOND_DIMS, random_graph

from graphormer_sepnorm.data import GraphormerCollator, add_shortest_paths
from graphormer_sepnorm.nn.bias_encoders import AttentionBias
from graphormer_sepnorm.nn.cpu import hops


@pytest.mark.parametrize("model_hops, collator_hops", [(4, 4), (2, 5), (6, 3)])
def test_block_sums_equal_index_add(model_hops, collator_hops, monkeypatch):
    graphs = add_shortest_paths([random_graph(n, seed) for seed, n in enumerate([9, 14, 3, 20])])
    batch = GraphormerCollator(collator_hops)(graphs)
    assert batch.hop_counts and sum(batch.hop_counts) == len(batch.hop_pair)
    torch.manual_seed(0)
    module = AttentionBias(3, BOND_DIMS, multi_hop_max_dist=model_hops).double()
    calls = []
    original = hops._GatherSumHopBlocks.apply
    monkeypatch.setattr(hops._GatherSumHopBlocks, "apply", lambda *a: calls.append(1)
                        or original(*a))
    weight = torch.randn(len(batch.pair_spd), 3, dtype=torch.float64)
    fast = hops.pair_bias(module, batch)
    slow = module.pair_bias(batch)
    assert calls
    torch.testing.assert_close(fast, slow, rtol=1e-12, atol=1e-12)
    params = [module.spatial.embedding.weight, *module.edge.parameters()]
    grads = [torch.autograd.grad((out * weight).sum(), params) for out in (fast, slow)]
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_unknown_layout_takes_the_reference():
    graphs = add_shortest_paths([random_graph(9, 0), random_graph(6, 1)])
    batch = GraphormerCollator(4)(graphs)
    shuffled = torch.randperm(len(batch.hop_pair))
    batch.hop_pair, batch.hop_index, batch.hop_edge = (
        batch.hop_pair[shuffled], batch.hop_index[shuffled], batch.hop_edge[shuffled])
    batch.hop_counts = None
    module = AttentionBias(3, BOND_DIMS, multi_hop_max_dist=4)
    torch.testing.assert_close(hops.pair_bias(module, batch), module.pair_bias(batch))
