"""FingerprintGP on hand-made feature vectors: kernel values, fit, missing targets, save/load."""

from __future__ import annotations

import pytest
import torch

from graphormer_sepnorm.ensemble.fingerprint_gp import (
    FingerprintGP,
    _evidence_gradient,
    _maximize_evidence,
    gp_columns,
    minmax_similarity,
)


def test_minmax_similarity_is_the_tanimoto_of_counts():
    a = torch.tensor([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0]])
    b = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 2.0], [0.0, 0.0, 0.0]])
    # sum(min) / sum(max): 2/4, 3/3, 0/3; an empty vector is like another empty one only
    expected = torch.tensor([[0.5, 1.0, 0.0], [0.0, 0.0, 1.0]])
    torch.testing.assert_close(minmax_similarity(a, b), expected)


def test_minmax_similarity_of_sparse_counts_matches_the_definition():
    generator = torch.Generator().manual_seed(7)
    a = torch.poisson(torch.full((9, 40), 0.1), generator=generator).double()
    b = torch.poisson(torch.full((13, 40), 0.3), generator=generator).double()
    a[0] = 0  # an empty molecule
    minima = torch.minimum(a[:, None], b[None]).sum(-1)
    maxima = torch.maximum(a[:, None], b[None]).sum(-1)
    torch.testing.assert_close(minmax_similarity(a, b), minima / maxima.clamp_min(1e-12))
    torch.testing.assert_close(minmax_similarity(a, b, rows=4), minmax_similarity(a, b))


def test_columns_come_from_the_featurizer_config_or_its_feature_names():
    recorded = {"mol_features": ["rdkit2d", "morgan"],
                "mol_feature_columns": {"rdkit2d": [0, 174], "morgan": [174, 2222]}}
    assert gp_columns(recorded) == {"rdkit2d": (0, 174), "morgan": (174, 2222)}
    # configs written before the record: the names' layout (no RDKit either way)
    assert gp_columns({"mol_features": ["rdkit2d", "morgan"]}) == gp_columns(recorded)
    assert gp_columns({"mol_features": ["morgan"]}) == {"morgan": (0, 2048)}
    assert gp_columns({"name": "ogb"}) == {}
    with pytest.raises(ValueError, match="needs features"):
        FingerprintGP({}, 1)


def _counts(n: int, width: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.poisson(torch.full((n, width), 0.5), generator=generator)


def test_a_molecule_unlike_any_training_one_gets_the_training_mean():
    # the prior mean: no shared substructure means zero covariance with every training molecule
    x = torch.cat([_counts(12, 8, 0), torch.zeros(12, 8)], 1)
    y = torch.randn(12, 1, generator=torch.Generator().manual_seed(1)) + 3
    gp = FingerprintGP({"morgan": (0, 16)}, 1)
    gp.fit(x, y, steps=20)
    far = torch.cat([torch.zeros(1, 8), torch.ones(1, 8)], 1)
    assert gp(far).item() == pytest.approx(y.mean().item(), abs=1e-5)


@pytest.mark.parametrize("terms", ["both", "tanimoto", "rbf"])
def test_the_closed_form_evidence_gradient_is_autograds(terms: str):
    x = _counts(15, 6, 4).double()
    d = torch.randn(15, 3, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    parts = (minmax_similarity(x, x) if terms != "rbf" else None,
             torch.cdist(d, d).square() / 3 if terms != "tanimoto" else None)
    z = torch.randn(15, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    log = torch.tensor([0.3, -0.7, 0.2, -1.5], dtype=torch.float64, requires_grad=True)
    hyper = log.exp()
    cov = FingerprintGP._kernel(parts, hyper) + (hyper[3] + 1e-6) * torch.eye(15, dtype=z.dtype)
    chol = torch.linalg.cholesky(cov)
    nll = 0.5 * z @ torch.cholesky_solve(z[:, None], chol)[:, 0] + chol.diagonal().log().sum()
    (expected,) = torch.autograd.grad(nll, log)
    torch.testing.assert_close(_evidence_gradient(parts, z, hyper.detach()), expected,
                               rtol=1e-9, atol=1e-12)


def test_fit_learns_a_target_of_the_features():
    x = torch.cat([_counts(60, 24, 2), torch.randn(60, 4)], 1)
    y = 2 * x[:, 24:25] + x[:, 25:26] + 0.3 * x[:, :1]
    gp = FingerprintGP({"morgan": (0, 24), "rdkit2d": (24, 28)}, 1)
    gp.fit(x[:50], y[:50])
    assert gp.fitted and gp.train_x.shape == (50, 28) and gp.train_x.dtype == torch.float16
    error = (gp(x[50:]) - y[50:]).abs().mean()
    baseline = (y[50:] - y[:50].mean()).abs().mean()
    assert error < 0.5 * baseline, (error, baseline)


def test_missing_targets_are_left_out_of_their_gp_only():
    x = _counts(20, 10, 3)
    y = torch.stack([x[:, 0] - x[:, 1], x[:, 2]], 1)
    holes = y.clone()
    holes[:5, 0] = float("nan")
    gp = FingerprintGP({"morgan": (0, 10)}, 2)
    gp.fit(x, holes, steps=30)
    alone = FingerprintGP({"morgan": (0, 10)}, 1)
    alone.fit(x[5:], y[5:, :1], steps=30)
    assert (gp.alpha[:5, 0] == 0).all() and (gp.alpha[:5, 1] != 0).all()
    torch.testing.assert_close(gp(x)[:, 0], alone(x)[:, 0], atol=1e-4, rtol=1e-4)


def test_a_fitted_gp_loads_into_an_empty_one():
    x = torch.cat([torch.randn(15, 3), _counts(15, 6, 4)], 1)
    y = torch.randn(15, 1, generator=torch.Generator().manual_seed(5))
    gp = FingerprintGP({"rdkit2d": (0, 3), "morgan": (3, 9)}, 1)
    gp.fit(x, y, steps=10)
    empty = FingerprintGP({"rdkit2d": (0, 3), "morgan": (3, 9)}, 1)
    assert not empty.fitted
    empty.load_state_dict(gp.state_dict())
    assert empty.fitted
    torch.testing.assert_close(empty(x), gp(x))


def test_a_gp_cast_to_bfloat16_still_predicts_in_float32():
    x = _counts(10, 6, 6)
    y = x[:, :1] * 2
    gp = FingerprintGP({"morgan": (0, 6)}, 1)
    gp.fit(x, y, steps=5)
    expected = gp(x)
    gp.to(torch.bfloat16)  # what Lightning's bf16-true does to a module
    predicted = gp(x.to(torch.bfloat16))
    assert predicted.dtype == torch.float32
    torch.testing.assert_close(predicted, expected, atol=0.05, rtol=0.02)


def test_hyperparameters_from_a_subset_weights_from_all():
    x = torch.cat([_counts(40, 12, 7), torch.randn(40, 3, generator=torch.Generator()
                                                   .manual_seed(8))], 1)
    y = x[:, 12:13] - 0.5 * x[:, :1]
    slices = {"morgan": (0, 12), "rdkit2d": (12, 15)}
    full, same, sub = (FingerprintGP(slices, 1) for _ in range(3))
    full.fit(x, y, steps=25)
    same.fit(x, y, steps=25, evidence_rows=40)  # as many as there are: all of them
    sub.fit(x, y, steps=25, evidence_rows=15)
    torch.testing.assert_close(same.hyper, full.hyper, rtol=0, atol=0)
    # the subset's hyperparameters maximize the evidence of those 15 molecules' targets
    # (standardized with all 40's mean and deviation)...
    pick = torch.randperm(40, generator=torch.Generator().manual_seed(0))[:15].sort().values
    train = full._select(x).to(torch.float16).double()[pick]
    z = (y[:, 0].double() - y[:, 0].double().mean()) / y[:, 0].double().std()
    expected = _maximize_evidence(full._parts(train, train), z[pick], 25, 0.05)
    torch.testing.assert_close(sub.hyper[0], expected.float(), rtol=0, atol=0)
    # ...and its weights and leave-one-out residuals are solved on all 40
    assert sub.alpha.shape == (40, 1) and bool((sub.loo_sq > 0).all())
    assert not torch.equal(sub.hyper, full.hyper)
