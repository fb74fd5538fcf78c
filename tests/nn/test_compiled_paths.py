"""What the reference model runs when traced by torch.compile or under vmap, against eager.

Traced (``backend="aot_eager"``: dynamo and autograd's tracing, no code generation), the atom
and edge embeddings are gathered sums instead of ``embedding_bag`` and dropout draws its mask
with ``rand_like``: in float64 without dropout the outputs, every gradient and the BatchNorm
statistics are those of the eager model to 1e-12.
"""

import copy

import pytest
import torch
from data.test_grid import mixed_graphs
from nn.test_backends import assert_same, model_pair, run

from graphormer_sepnorm.data.grid import GridGraphs
from graphormer_sepnorm.nn.dropout import dropout
from graphormer_sepnorm.nn.node_encoders import FeatureEmbedding


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_gathered_feature_sums_equal_embedding_bag(mode) -> None:
    embed = FeatureEmbedding([5, 3, 7], dim=4, mode=mode).double()
    features = torch.tensor([[4, 0, 6], [1, 2, 0], [0, 0, 0]])
    expected = embed(features)
    (expected ** 2).sum().backward()
    bag_grad = embed.weight.grad.clone()
    embed.weight.grad = None
    embed.gather_sums = True
    got = embed(features)
    (got ** 2).sum().backward()
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(embed.weight.grad, bag_grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("train", "options"), [(True, dict()), (True, dict(sepnorm=False)),
                                                (False, dict(edge_encoding="simple"))])
def test_traced_model_computes_what_the_eager_one_does(train, options) -> None:
    graphs = mixed_graphs()
    eager, _ = model_pair(torch.float64, multi_hop_max_dist=5, **options)
    traced = copy.deepcopy(eager)
    traced.encode = torch.compile(traced.encode, backend="aot_eager", fullgraph=True)
    batch = GridGraphs(graphs, multi_hop_max_dist=5).batch(torch.arange(len(graphs)), 32)
    assert_same(run(eager, batch, train, False), run(traced, batch, train, False), 1e-12)


def test_traced_dropout_keeps_one_minus_p_and_scales() -> None:
    torch.manual_seed(0)
    x = torch.ones(200_000, dtype=torch.float64)
    out = torch.compile(dropout, backend="aot_eager", fullgraph=True)(x, 0.25, True)
    assert set(out.unique().tolist()) == {0.0, 4 / 3}
    assert abs(float((out > 0).double().mean()) - 0.75) < 0.005  # 5 standard deviations
    assert torch.equal(dropout(x, 0.25, False), x)
