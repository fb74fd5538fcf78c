"""Attention per group of similar-sized graphs equals attention over the padded batch."""

import pytest
import torch
from graphs import ATOM_DIMS, BOND_DIMS, random_graph

from graphormer_sepnorm.data import GraphormerCollator
from graphormer_sepnorm.nn import Graphormer
from graphormer_sepnorm.nn import size_groups as sg
from graphormer_sepnorm.nn.size_groups import SizeGroups

collate = GraphormerCollator()


def mask(sizes: list[int]) -> torch.Tensor:
    return torch.arange(max(sizes))[None, :] < torch.tensor(sizes)[:, None]


def test_plan_groups_consecutive_sizes_and_covers_every_graph():
    sizes = [30, 3, 4, 3, 90, 5, 29, 4]
    groups = SizeGroups.plan(mask(sizes), num_heads=8, overhead=100)
    assert groups is not None and sum(groups.counts) == len(sizes)
    order = groups.order.tolist()
    assert sorted(sizes) == [sizes[i] for i in order]
    assert groups.inverse[groups.order].tolist() == list(range(len(sizes)))
    start = 0
    for count, length in zip(groups.counts, groups.lengths, strict=True):
        assert length == 1 + max(sorted(sizes)[start:start + count])
        start += count
    assert groups.lengths[-1] == 91 and groups.length == 91
    assert groups.lengths[0] < 10  # the small graphs are not padded to 90


def test_plan_keeps_one_group_when_grouping_does_not_pay():
    assert SizeGroups.plan(mask([7, 7, 7]), num_heads=8) is None  # one size
    assert SizeGroups.plan(mask([7]), num_heads=8) is None
    assert SizeGroups.plan(mask([20, 21, 22]), num_heads=8) is None  # overhead > savings
    assert SizeGroups.plan(mask([20, 21, 22]), num_heads=8, overhead=0) is not None


def test_split_and_merge_round_trip_with_zero_padding():
    sizes = [9, 2, 5, 2]
    groups = SizeGroups.plan(mask(sizes), num_heads=2, overhead=0)
    x = torch.randn(4, 10, 3)
    merged = groups.merge(groups.split(x))
    for g, n in enumerate(sizes):
        length = 1 + max(s for s in sizes if s <= n)  # its group's length, with overhead 0
        torch.testing.assert_close(merged[g, :length], x[g, :length])
        assert not merged[g, length:].any()


def test_token_rows_list_each_groups_tokens_group_after_group():
    groups = SizeGroups(order=None, inverse=None, counts=[2, 1], lengths=[3, 5], length=5)
    # graphs 0 and 1 keep their first 3 tokens of 5, graph 2 all 5
    assert groups.token_rows().tolist() == [0, 1, 2, 5, 6, 7, 10, 11, 12, 13, 14]
    assert SizeGroups.whole(4, 7).token_rows() is None  # nothing cut
    sorting = SizeGroups.plan(mask([9, 2, 5, 2]), num_heads=2, overhead=0)
    with pytest.raises(ValueError, match="sorted"):
        sorting.token_rows()


def models(dropout: float = 0.0) -> Graphormer:
    torch.manual_seed(0)
    return Graphormer(ATOM_DIMS, BOND_DIMS, num_tasks=2, num_layers=3, hidden_dim=16,
                      ffn_dim=24, num_heads=4, dropout=dropout, attention_dropout=dropout,
                      activation_dropout=dropout)


@pytest.fixture
def ungrouped(monkeypatch):
    """Turns grouping off (as if every batch were one group)."""
    def off():
        monkeypatch.setattr(SizeGroups, "plan", classmethod(lambda cls, *a, **k: None))
    return off


@pytest.mark.parametrize("train", [False, True])
def test_grouped_model_equals_padded_model_outputs_and_gradients(monkeypatch, ungrouped, train):
    # unsorted sizes, a big graph among small ones, a disconnected one (p small)
    graphs = [random_graph(n, seed=s, p=0.3) for s, n in enumerate([4, 40, 6, 5, 21, 3, 6])]
    graphs.append(random_graph(12, seed=9, p=0.05))
    batch = collate(graphs)
    monkeypatch.setattr(sg, "GROUP_OVERHEAD", 0)
    assert SizeGroups.plan(batch.node_mask, 4, 0) is not None
    # random weights: a plain sum of BatchNorm outputs has no gradient (train mode)
    gen = torch.Generator().manual_seed(0)
    w_out, w_tok = torch.randn(len(graphs), 2, generator=gen), torch.randn(len(graphs), 16,
                                                                          generator=gen)
    results = []
    for turn_off in (False, True):
        if turn_off:
            ungrouped()
        model = models().train(train)  # no dropout, so training mode is deterministic
        out = model(batch)
        tokens, _ = model.encode(batch)
        ((out * w_out).sum() + (tokens[:, 0] * w_tok).sum()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((out.detach(), tokens[:, 0].detach(), grads))
    (out_a, tok_a, grad_a), (out_b, tok_b, grad_b) = results
    torch.testing.assert_close(out_a, out_b, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(tok_a, tok_b, atol=1e-5, rtol=1e-4)
    assert grad_a.keys() == grad_b.keys()
    if train:
        # Every graph starts with the same graph token, so the first BatchNorm sees zero variance
        # and its backward scales float rounding by 1/sqrt(eps): that gradient is noise, and
        # some of it reaches the first layer. Other gradients are zero in exact arithmetic
        # (a shift of every graph token, undone by the final BatchNorm): tolerances are relative
        # to the largest gradient of the model.
        del grad_a["graph_token"], grad_b["graph_token"]
    scale = max(g.abs().max().item() for g in grad_b.values())
    for name in grad_a:
        torch.testing.assert_close(grad_a[name], grad_b[name], atol=1e-3 * scale, rtol=1e-3,
                                   msg=lambda m, n=name: f"{n}: {m}")


def test_grouped_training_with_dropout_is_finite_and_reproducible():
    graphs = [random_graph(n, seed=s, p=0.3) for s, n in enumerate([4, 40, 6, 5, 21])]
    batch = collate(graphs)
    outs = []
    for _ in range(2):
        model = models(dropout=0.1).train()
        torch.manual_seed(1)
        out = model(batch)
        out.sum().backward()
        assert torch.isfinite(out).all()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
        outs.append(out.detach())
    torch.testing.assert_close(outs[0], outs[1])
