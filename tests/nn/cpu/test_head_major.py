import pytest
import torch

from graphormer_sepnorm.nn.attention import BiasedMultiheadAttention
from graphormer_sepnorm.nn.cpu.head_major import _SplitHeads, attend_head_major, head_minor_rows


def test_head_minor_rows_moves_row_s_h_j_to_s_j_h():
    weight = torch.arange(2 * 3 * 4).view(2 * 3 * 4, 1)  # 2 blocks, 3 heads, head dim 4
    out = head_minor_rows(weight, num_heads=3, blocks=2).view(2, 4, 3)
    for s in range(2):
        for h in range(3):
            for j in range(4):
                assert out[s, j, h] == s * 12 + h * 4 + j


def test_split_heads_views_and_gradient():
    heads, batch, length, head_dim = 3, 2, 5, 4
    qkv_t = torch.randn(3 * head_dim * heads, batch * length, dtype=torch.float64,
                        requires_grad=True)
    q_t, k_t, v_t = _SplitHeads.apply(qkv_t, heads, batch, length)
    assert q_t.shape == (heads * batch, head_dim, length)
    assert q_t.data_ptr() == qkv_t.data_ptr()  # views, no copy
    # head-major batch order g = h * B + b; rows (s, j, h) of qkv_t
    rows = qkv_t.detach().view(3, head_dim, heads, batch, length)
    for h in range(heads):
        for b in range(batch):
            torch.testing.assert_close(k_t[h * batch + b], rows[1, :, h, b])
    assert torch.autograd.gradcheck(
        lambda t: [x * 1.0 for x in _SplitHeads.apply(t, heads, batch, length)], (qkv_t,))


@pytest.mark.parametrize("num_queries", [None, 1])
@pytest.mark.parametrize("training", [False, True])
def test_equals_the_explicit_attention_with_gradients(num_queries, training):
    torch.manual_seed(0)
    attention = BiasedMultiheadAttention(12, 3, dropout=0.0).train(training)
    x = torch.randn(4, 6, 12, requires_grad=True)
    bias = torch.randn(4, 3, 6, 6, requires_grad=True)
    grad = torch.randn(4, 6 if num_queries is None else num_queries, 12)

    def run(explicit: bool):
        if explicit:  # need_weights takes the plain autograd path
            out = attention(x, bias, need_weights=True, num_queries=num_queries)[0]
        else:
            heads = attention.num_heads
            queries = 6 if num_queries is None else num_queries
            bias_hb = bias[:, :, :queries].transpose(0, 1).reshape(-1, queries, 6)
            out = attend_head_major(
                x, head_minor_rows(attention.qkv.weight, heads, 3),
                head_minor_rows(attention.qkv.bias, heads, 3),
                head_minor_rows(attention.out.weight.t(), heads, 1), attention.out.bias,
                bias_hb, heads, num_queries)
        out.backward(grad)
        tensors = [x, bias, *attention.parameters()]
        grads = [t.grad.clone() for t in tensors]
        for t in tensors:
            t.grad = None
        return out.detach(), grads

    (expected, expected_grads), (out, grads) = run(True), run(False)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-5)
    for a, b in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
