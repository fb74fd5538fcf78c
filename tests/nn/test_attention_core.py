import torch

from graphormer_sepnorm.nn.attention_core import biased_attention
from graphormer_sepnorm.nn.dropout import dropout


def reference(q, k, v, bias, scale, p):
    probs = (torch.baddbmm(bias, q, k.transpose(1, 2), alpha=scale)).softmax(-1)
    return dropout(probs, p) @ v


def inputs(dtype=torch.float64):
    gen = torch.Generator().manual_seed(0)
    shapes = [(6, 5, 4), (6, 7, 4), (6, 7, 4), (6, 5, 7)]
    return [torch.randn(s, generator=gen, dtype=dtype).requires_grad_() for s in shapes]


def test_gradcheck_without_dropout():
    q, k, v, bias = inputs()
    assert torch.autograd.gradcheck(lambda *t: biased_attention(*t, 0.5), (q, k, v, bias))


def test_with_dropout_equals_autograd_reference_with_the_same_mask():
    for p in (0.0, 0.3):
        ours, ref = inputs(torch.float32), inputs(torch.float32)
        grad_out = torch.randn(6, 5, 4)
        torch.manual_seed(7)
        out = biased_attention(*ours, 0.5, p)
        torch.manual_seed(7)
        expected = reference(*ref, 0.5, p)
        torch.testing.assert_close(out, expected)
        out.backward(grad_out)
        expected.backward(grad_out)
        for a, b in zip(ours, ref, strict=True):
            torch.testing.assert_close(a.grad, b.grad)
