import torch

from graphormer_sepnorm.nn.cpu.dropout import dropout


def test_keep_rate_and_scaling():
    x = torch.ones(400_000)
    out = dropout(x, 0.1)
    kept = out != 0
    assert abs(kept.float().mean().item() - 0.9) < 0.003
    scale = 65536 / (65536 - round(0.1 * 65536))
    assert torch.allclose(out[kept], torch.full_like(out[kept], scale))
    assert abs(out.mean().item() - 1.0) < 0.005  # expectation preserved


def test_masks_are_independent_across_slices_and_calls():
    x = torch.ones(4096)
    a, b = dropout(x, 0.5) != 0, dropout(x, 0.5) != 0
    assert 0.4 < (a == b).float().mean() < 0.6
    # neighbouring elements come from the same 64-bit word: they must still be uncorrelated
    assert 0.4 < (a[0::4] == a[1::4]).float().mean() < 0.6


def test_eval_identity_gradient_and_reproducibility():
    x = torch.randn(5, 7, requires_grad=True)
    assert dropout(x, 0.3, training=False) is x
    torch.manual_seed(1)
    out = dropout(x, 0.3)
    out.sum().backward()
    assert torch.equal(x.grad != 0, out != 0)
    torch.manual_seed(1)
    assert torch.equal(dropout(x, 0.3), out)


def test_bounds():
    assert torch.equal(dropout(torch.ones(10), 1.0), torch.zeros(10))
    assert torch.equal(dropout(torch.ones(10), 0.0), torch.ones(10))


def test_backward_scales_kept_elements_like_forward():
    x = torch.randn(3, 50, requires_grad=True)
    out = dropout(x, 0.2)
    grad = torch.randn(3, 50)
    out.backward(grad)
    scale = 65536 / (65536 - round(0.2 * 65536))
    kept = out != 0
    torch.testing.assert_close(x.grad, grad * kept * scale)
    torch.testing.assert_close(out, x.detach() * kept * scale)
