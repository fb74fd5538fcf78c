"""Predictive deviations: the GP's leave-one-out residuals and variance by their definitions,
split-conformal calibration, and a heteroscedastic target (wider intervals where noisier)."""

import math

import pytest
import torch

from graphormer_sepnorm.convert import convert_ensemble
from graphormer_sepnorm.ensemble.blend import BlendedModel
from graphormer_sepnorm.ensemble.calibration import (
    Z90,
    conformal_scale,
    coverage,
    gaussian_nll,
    spearman,
)
from graphormer_sepnorm.ensemble.fingerprint_gp import FingerprintGP


def counts(n: int, width: int, seed: int) -> torch.Tensor:
    return torch.poisson(torch.full((n, width), 0.5), generator=torch.Generator().manual_seed(seed))


def test_calibration_scores_by_hand():
    assert float(conformal_scale(torch.arange(1.0, 11.0))) == 10.0  # ceil(11 * 0.9) = 10th
    assert float(conformal_scale(torch.arange(1.0, 21.0))) == 19.0  # ceil(21 * 0.9) = 19th
    assert float(conformal_scale(torch.tensor([2.0, float("nan"), 1.0]), 0.5)) == 2.0
    mean, std = torch.zeros(4, 1), torch.ones(4, 1)
    y = torch.tensor([[0.5], [1.6], [-1.7], [float("nan")]])
    assert float(coverage(mean, std, y)) == pytest.approx(2 / 3)
    expected = sum(0.5 * math.log(2 * math.pi) + v * v / 2 for v in (0.5, 1.6, -1.7)) / 3
    assert float(gaussian_nll(mean, std, y)) == pytest.approx(expected)
    assert float(spearman(torch.tensor([1.0, 2, 3, 4]), torch.tensor([10.0, 30, 20, 40]))) == \
        pytest.approx(0.8)


def fitted(n: int = 30, seed: int = 0) -> tuple[FingerprintGP, torch.Tensor, torch.Tensor]:
    x = torch.cat([counts(n, 12, seed), torch.randn(n, 3, generator=torch.Generator(
        ).manual_seed(seed + 1))], 1)
    y = (x[:, :2].sum(1, keepdim=True) + x[:, 12:13]
         + 0.2 * torch.randn(n, 1, generator=torch.Generator().manual_seed(seed + 2)))
    gp = FingerprintGP({"morgan": (0, 12), "rdkit2d": (12, 15)}, 1)
    gp.fit(x, y, steps=30)
    return gp, x, y


def kernel_matrix(gp: FingerprintGP, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return gp._kernel(gp._parts(a.double(), b.double()), gp.hyper[0].double())


def test_leave_one_out_residuals_are_those_of_refits_without_the_molecule():
    gp, x, y = fitted()
    train = gp.train_x.double()
    z = ((y[:, 0].double() - gp.y_mean.double()) / gp.y_std.double())
    noise = float(gp.hyper[0, 3]) + 1e-6
    for i in (0, 7, 29):
        keep = torch.arange(len(x)) != i
        cov = kernel_matrix(gp, train[keep], train[keep]) + noise * torch.eye(len(x) - 1,
                                                                             dtype=torch.float64)
        mean = kernel_matrix(gp, train[i:i + 1], train[keep]) @ torch.linalg.solve(cov, z[keep])
        assert float(gp.loo_sq[i, 0]) == pytest.approx(float((z[i] - mean) ** 2), rel=1e-4)


def test_predictive_variance_is_the_posterior_one_plus_the_local_residuals():
    gp, x, _ = fitted()
    new = torch.cat([counts(4, 12, 9), torch.randn(4, 3)], 1)
    _, std = gp.predict(new)
    train = gp.train_x.double()
    noise = float(gp.hyper[0, 3]) + 1e-6
    cov = kernel_matrix(gp, train, train) + noise * torch.eye(len(train), dtype=torch.float64)
    k = kernel_matrix(gp, new.half().float(), train)
    prior = float(gp.hyper[0, 0] + gp.hyper[0, 1])
    latent = prior - (k @ torch.linalg.solve(cov, k.T)).diagonal()
    local = (k @ gp.loo_sq[:, 0].double()) / k.sum(1)
    expected = (latent.clamp_min(0) + local).sqrt() * float(gp.y_std[0])
    torch.testing.assert_close(std[:, 0].double(), expected, rtol=2e-3, atol=1e-4)
    # a molecule unlike all training ones is the most uncertain
    far = torch.cat([torch.zeros(1, 12), 10 * torch.ones(1, 3)], 1)
    assert gp.predict(far)[1].item() > std.max().item()


def heteroscedastic(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two chemotypes (disjoint substructure bits): the second's targets are 8x noisier."""
    gen = torch.Generator().manual_seed(seed)
    noisy = torch.rand(n, generator=gen) < 0.5
    bits = torch.poisson(torch.full((n, 16), 1.0), generator=gen)
    bits[noisy, :8] = 0
    bits[~noisy, 8:] = 0
    signal = bits[:, :4].sum(1) - bits[:, 8:12].sum(1)
    y = 0.3 * signal + torch.where(noisy, 1.6, 0.2) * torch.randn(n, generator=gen)
    return bits, y[:, None], noisy


def test_heteroscedastic_target_gets_wider_intervals_where_noisier_at_nominal_coverage():
    x, y, noisy = heteroscedastic(900, 0)
    train, val, test = slice(0, 300), slice(300, 500), slice(500, 900)
    gp = FingerprintGP({"morgan": (0, 16)}, 1)
    gp.fit(x[train], y[train], steps=60)
    blend = BlendedModel(gp, 1.0)  # the GP alone: a network adds nothing here
    none = torch.zeros(len(x), 1)
    mean, sigma = blend.predict(none[val], x[val], raw=True)
    blend.calibrate(mean, sigma, y[val])
    mean, std = blend.predict(none[test], x[test])
    assert 0.85 <= float(coverage(mean, std, y[test])) <= 0.95
    # 8x the noise: 2.6x the deviation (the GP's one noise level smooths the quiet chemotype
    # too much, and its residuals there are larger than its noise)
    quiet, loud = std[~noisy[test]].mean(), std[noisy[test]].mean()
    assert loud > 2 * quiet, (float(quiet), float(loud))
    # intervals are 2 * Z90 * std wide: far narrower in the quiet chemotype, still covering it
    assert float(coverage(mean[~noisy[test]], std[~noisy[test]], y[test][~noisy[test]])) > 0.8


def test_an_uncalibrated_or_old_gp_gives_no_deviations():
    gp, x, y = fitted()
    assert BlendedModel(gp, 0.5).predict(torch.zeros(3, 1), x[:3])[1] is None
    entry = BlendedModel(gp, 0.5).to_checkpoint()  # as saved before the deviations existed:
    entry["state"] = {k: v for k, v in entry["state"].items() if k not in ("present", "loo_sq")}
    old = FingerprintGP({"morgan": (0, 12), "rdkit2d": (12, 15)}, 1)
    with pytest.raises(RuntimeError, match="present"):
        old.load_state_dict(entry["state"])  # unconverted
    old.load_state_dict(convert_ensemble(entry)["state"])
    assert old.fitted and not old.has_std
    torch.testing.assert_close(old(x), gp(x))
    blend = BlendedModel(old, 0.5, q90=[1.0])
    assert not blend.calibrated and blend.predict(torch.zeros(3, 1), x[:3])[1] is None
    entry = BlendedModel(gp, 0.5, q90=[2.0]).to_checkpoint()
    assert BlendedModel.from_checkpoint(entry).calibrated
    assert not BlendedModel.from_checkpoint(entry, weight=1.0).calibrated  # another blend
    assert Z90 == pytest.approx(1.6448536)


def test_the_members_spread_adds_to_the_gps_variance_and_old_calibrations_keep_the_gps():
    gp, x, _ = fitted()
    gp_mean, gp_sigma = gp.predict(x[:4])
    preds = gp_mean + torch.tensor([[0.0], [1.0], [-2.0], [4.0]])  # the network disagrees
    blend = BlendedModel(gp, 0.25)
    mean, sigma = blend.predict(preds, x[:4], raw=True)
    torch.testing.assert_close(mean, 0.75 * preds + 0.25 * gp_mean)
    # the mixture's variance about its mean: w (1 - w) d^2 beside the GP's own
    d = preds - gp_mean
    torch.testing.assert_close(sigma, (gp_sigma.square() + 0.25 * 0.75 * d.square()).sqrt())
    assert torch.equal(sigma[0], gp_sigma[0]) and bool((sigma[1:] > gp_sigma[1:]).all())
    # the network alone or the GP alone: no second member, no spread
    for weight in (0.0, 1.0):
        torch.testing.assert_close(BlendedModel(gp, weight).predict(preds, x[:4], raw=True)[1],
                                   gp_sigma)
    entry = BlendedModel(gp, 0.25, q90=[2.0]).to_checkpoint()
    assert BlendedModel.from_checkpoint(entry).deviation == "gp+members"
    old = {k: v for k, v in entry.items() if k != "deviation"}  # calibrated on the GP's alone
    old = convert_ensemble(old)
    assert old["deviation"] == "gp"
    torch.testing.assert_close(BlendedModel.from_checkpoint(old).predict(preds, x[:4])[1],
                               gp_sigma * 2.0 / Z90)
    with pytest.raises(ValueError, match="deviation must be one of"):
        BlendedModel(gp, 0.5, deviation="mc_dropout")
