"""The one-pass C dropout (and dropout plus residual) against its own mask."""

import pytest
import torch

from graphormer_sepnorm.nn.cpu.dropout import dropout
from graphormer_sepnorm.nn.cpu.native import build, keep_scale
from graphormer_sepnorm.nn.cpu.native import fused_dropout as fd

pytestmark = pytest.mark.skipif(not fd.usable(torch.zeros(1)),
                                reason="no AVX2 CPU or no C compiler here")


def seed_of_next_call(seed: int) -> int:
    """The kernel's seed after ``torch.manual_seed(seed)``: one draw from the global generator."""
    torch.manual_seed(seed)
    return int(torch.randint(0, 2**62, (1,)))


@pytest.mark.parametrize("with_residual", [False, True])
def test_forward_and_backward_use_one_mask(with_residual):
    x = torch.randn(3, 37, 5, requires_grad=True)  # 555 elements: a partial last vector
    residual = torch.randn(3, 37, 5, requires_grad=True) if with_residual else None
    torch.manual_seed(7)
    out = fd.fused_dropout(x, 0.3, residual)
    keep = fd.keep_mask_flat(x.numel(), 0.3, seed_of_next_call(7)).view_as(x)
    expected = x.detach() * keep * keep_scale(0.3)
    if with_residual:
        expected = expected + residual.detach()
    torch.testing.assert_close(out, expected)
    grad = torch.randn_like(x)
    out.backward(grad)
    torch.testing.assert_close(x.grad, grad * keep * keep_scale(0.3))
    if with_residual:
        assert torch.equal(residual.grad, grad)


def test_keep_rate_seeds_and_reproducibility():
    keep = fd.keep_mask_flat(400_000, 0.1, seed=11)
    assert abs(keep.mean().item() - (1 - 6554 / 65536)) < 0.003
    assert torch.equal(keep, fd.keep_mask_flat(400_000, 0.1, seed=11))
    agree = (keep == fd.keep_mask_flat(400_000, 0.1, seed=12)).float().mean().item()
    assert abs(agree - (0.9**2 + 0.1**2)) < 0.005
    # neighbours share no hash bits: pairs of adjacent elements are independent
    assert abs((keep[0::2] == keep[1::2]).float().mean().item() - 0.82) < 0.005
    x = torch.ones(1000)
    torch.manual_seed(3)
    first = dropout(x, 0.5)
    torch.manual_seed(3)
    assert torch.equal(dropout(x, 0.5), first)
    assert not torch.equal(dropout(x, 0.5), first)


def test_thread_split_gives_the_same_bits(monkeypatch):
    x = torch.randn(100_003)
    outs = []
    for count in (1, 2):
        monkeypatch.setattr(torch, "get_num_threads", lambda count=count: count)
        torch.manual_seed(1)
        outs.append(fd.fused_dropout(x, 0.2))
    assert torch.equal(*outs)
    cuts = []
    monkeypatch.setattr(build, "_pool", lambda workers, pid: cuts.append(workers) or
                        build.ThreadPoolExecutor(workers))
    fd.fused_dropout(x, 0.2)
    assert cuts == [2]


def test_dropout_takes_the_fused_path_only_where_it_applies(monkeypatch):
    calls = []
    monkeypatch.setattr(fd, "fused_dropout", lambda *a: calls.append(a) or a[0])
    x = torch.randn(4, 6)
    dropout(x, 0.1)
    dropout(x, 0.1, residual=torch.randn(4, 6))
    assert len(calls) == 2
    dropout(x.double(), 0.1)  # float64: the uint8-mask path
    dropout(x.t(), 0.1)  # not contiguous
    dropout(x, 0.1, residual=torch.randn(6, 4).t())  # residual not contiguous
    dropout(x, 0.1, training=False)
    assert len(calls) == 2
    residual = torch.randn(4, 6)
    assert torch.equal(dropout(x, 0.1, training=False, residual=residual), residual + x)
