"""Group biases built from the pairs equal the full bias cut into groups, values and gradients."""

from dataclasses import replace

import pytest
import torch
from graphs import BOND_DIMS, random_graph

from graphormer_sepnorm.data import GraphormerCollator
from graphormer_sepnorm.nn.bias_encoders import AttentionBias
from graphormer_sepnorm.nn.cpu.group_bias import group_biases
from graphormer_sepnorm.nn.cpu.size_groups import SizeGroups

collate = GraphormerCollator()


def split_bias(groups: SizeGroups, bias: torch.Tensor) -> list[torch.Tensor]:
    """The full bias ``[B, H, L, L]`` cut into each group's ``[H * B_g, L_g, L_g]``.

    Head-major (``g = h * B_g + b``); keys-first (``[g, key, query]``) when ``groups.fused``.
    """
    if groups.order is not None:
        bias = bias.index_select(0, groups.order)
    if groups.fused:
        bias = bias.transpose(2, 3)
    return [part[:, :, :length, :length].transpose(0, 1).reshape(-1, length, length).contiguous()
            for part, length in zip(bias.split(groups.counts), groups.lengths, strict=True)]


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("shuffled", [False, True])
def test_group_biases_equal_the_cut_full_bias(fused, shuffled):
    sizes = [3, 9, 1, 14, 4, 9, 22, 6]  # a single atom, equal sizes, a large graph
    graphs = [random_graph(n, seed=s, p=0.3) for s, n in
              enumerate(sizes if shuffled else sorted(sizes))]
    batch = collate(graphs)
    torch.manual_seed(0)
    encoder = AttentionBias(4, BOND_DIMS).double()
    torch.nn.init.normal_(encoder.virtual_distance)
    groups = SizeGroups.plan(batch.node_mask, 4, overhead=0)
    assert groups is not None and len(groups.counts) > 2
    assert (groups.order is not None) == shuffled
    groups = replace(groups, fused=fused)
    full = split_bias(groups, encoder(batch))
    sorted_mask = batch.node_mask if groups.order is None else batch.node_mask[groups.order]
    direct = group_biases(encoder.pair_bias(batch), encoder.virtual_distance,
                          replace(groups, order=None, inverse=None), sorted_mask,
                          batch.pair_slot, groups.inverse)
    weights = [torch.randn_like(part) for part in full]
    losses = []
    for parts in (full, direct):
        for a, b in zip(parts, full, strict=True):
            assert torch.equal(a, b)
        finite = [p.masked_fill(torch.isinf(p), 0) for p in parts]
        losses.append(sum((p * w).sum() for p, w in zip(finite, weights, strict=True)))
    params = list(encoder.parameters())
    for a, b in zip(*(torch.autograd.grad(loss, params, allow_unused=True) for loss in losses),
                    strict=True):
        if a is None:
            assert b is None
        else:
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
