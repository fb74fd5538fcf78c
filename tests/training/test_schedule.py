import pytest

from graphormer_sepnorm.training.optimization import resolve_warmup, warmup_polynomial_decay


def lr(step: int, power: float = 1.0) -> float:
    return warmup_polynomial_decay(step, warmup_steps=10, total_steps=110, peak_lr=1e-3,
                                   end_lr=1e-5, power=power)


def test_linear_warmup_reaches_peak():
    assert lr(0) == pytest.approx(1e-4)
    assert lr(4) == pytest.approx(5e-4)
    assert lr(9) == pytest.approx(1e-3)
    assert lr(10) == pytest.approx(1e-3)


def test_polynomial_decay_to_end_lr():
    assert lr(60) == pytest.approx((1e-3 - 1e-5) * 0.5 + 1e-5)
    assert lr(60, power=2.0) == pytest.approx((1e-3 - 1e-5) * 0.25 + 1e-5)
    assert lr(110) == pytest.approx(1e-5)
    assert lr(500) == pytest.approx(1e-5)


def test_no_warmup_starts_at_peak():
    assert warmup_polynomial_decay(0, 0, 100, 2e-4, 0.0) == pytest.approx(2e-4)


def test_resolve_warmup_fraction_or_steps():
    assert resolve_warmup(0.1, 1200) == 120
    assert resolve_warmup(40000, 400000) == 40000
    assert resolve_warmup(0, 50) == 0
    with pytest.raises(ValueError):
        resolve_warmup(-1, 10)
