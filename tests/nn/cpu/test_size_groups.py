"""Size groups: the plan, the token rows, and grouped training with dropout.

That grouped attention equals the padded batch's is the backends' contract
(``tests/nn/test_backends.py``).
"""

import pytest
import torch
from graphs import ATOM_DIMS, BOND_DIMS, random_graph

from graphormer_sepnorm.data import GraphormerCollator
from graphormer_sepnorm.nn import Graphormer, GraphormerConfig, set_backend
from graphormer_sepnorm.nn.cpu.size_groups import SizeGroups

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
    config = GraphormerConfig(tuple(ATOM_DIMS), tuple(BOND_DIMS), num_tasks=2, num_layers=3,
                              hidden_dim=16, ffn_dim=24, num_heads=4, dropout=dropout,
                              attention_dropout=dropout, activation_dropout=dropout)
    return set_backend(Graphormer(config), "cpu")


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
