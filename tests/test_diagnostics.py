import math

import pytest
import torch

from graphormer_sepnorm.diagnostics import effective_rank, singular_values, uniformity


def test_effective_rank_of_orthonormal_and_identical_embeddings():
    assert effective_rank(torch.eye(6)) == pytest.approx(6.0)
    assert effective_rank(torch.ones(10, 4) * 3) == pytest.approx(1.0)
    # two directions of equal strength, whatever the basis
    q, _ = torch.linalg.qr(torch.randn(8, 8))
    z = torch.cat([q[:, :1].T.repeat(3, 1), q[:, 1:2].T.repeat(3, 1)])
    assert effective_rank(z) == pytest.approx(2.0)
    assert effective_rank(torch.zeros(3, 3)) == 0.0


def test_singular_values_sorted_and_centering():
    z = torch.tensor([[3.0, 0.0], [0.0, 1.0]])
    assert singular_values(z).tolist() == [3.0, 1.0]
    same = torch.ones(5, 3)
    assert singular_values(same, center=True).abs().max() < 1e-12
    assert effective_rank(torch.eye(4) + 5, center=True) == pytest.approx(3.0)


def test_uniformity_of_antipodal_identical_and_orthogonal_points():
    assert uniformity(torch.tensor([[1.0, 0.0], [-2.0, 0.0]])) == pytest.approx(-8.0)
    assert uniformity(torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])) == pytest.approx(0.0)
    # orthonormal: every squared distance is 2
    assert uniformity(torch.eye(5)) == pytest.approx(-4.0)
    assert uniformity(torch.eye(5), t=1.0) == pytest.approx(-2.0)
    with pytest.raises(ValueError):
        uniformity(torch.ones(1, 3))


def test_spread_embeddings_are_more_uniform_than_collapsed_ones():
    gen = torch.Generator().manual_seed(0)
    spread = torch.randn(200, 16, generator=gen)
    collapsed = spread[:, :1] * torch.ones(1, 16) + 0.01 * spread
    assert uniformity(spread) < uniformity(collapsed)
    assert effective_rank(spread) > 10 > 2 > effective_rank(collapsed)
    assert math.isfinite(uniformity(spread))
