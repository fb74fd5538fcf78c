import pytest
import torch

from graphormer_sepnorm.nn.cpu.dropout import keep_mask
from graphormer_sepnorm.nn.cpu.head_major import biased_attention


def inputs(dtype=torch.float64):
    gen = torch.Generator().manual_seed(0)
    # q_t [G, d, Lq], k_t and v_t [G, d, L], bias [G, Lq, L]
    shapes = [(6, 4, 5), (6, 4, 7), (6, 4, 7), (6, 5, 7)]
    return [torch.randn(s, generator=gen, dtype=dtype).requires_grad_() for s in shapes]


@pytest.mark.parametrize("recompute", [False, True])
def test_gradcheck_without_dropout(recompute):
    q, k, v, bias = inputs()
    assert torch.autograd.gradcheck(lambda *t: biased_attention(*t, 0.5, 0.0, recompute),
                                    (q, k, v, bias))


@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("p", [0.0, 0.3])
def test_with_dropout_equals_autograd_reference_with_the_same_mask(p, recompute):
    ours, ref = inputs(torch.float32), inputs(torch.float32)
    grad_out = torch.randn(6, 4, 5)
    torch.manual_seed(7)
    out = biased_attention(*ours, 0.5, p, recompute)
    torch.manual_seed(7)
    seed = int(torch.randint(0, 2**62, (1,)))
    mask = torch.ones(6, 5, 7)
    if p > 0:
        keep, scale = keep_mask((6, 5, 7), p, torch.Generator().manual_seed(seed))
        mask = keep * scale
    q, k, v = (t.transpose(1, 2) for t in ref[:3])  # the usual [G, L, d] layout
    probs = torch.baddbmm(ref[3], q, k.transpose(1, 2), alpha=0.5).softmax(-1)
    expected = ((probs * mask) @ v).transpose(1, 2)
    torch.testing.assert_close(out, expected)
    out.backward(grad_out)
    expected.backward(grad_out)
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a.grad, b.grad)


def test_dropout_is_reproducible_under_the_global_seed_and_varies_otherwise():
    q, k, v, bias = inputs(torch.float32)
    torch.manual_seed(3)
    a = biased_attention(q, k, v, bias, 0.5, 0.5)
    torch.manual_seed(3)
    b = biased_attention(q, k, v, bias, 0.5, 0.5)
    c = biased_attention(q, k, v, bias, 0.5, 0.5)
    assert torch.equal(a, b) and not torch.equal(a, c)
