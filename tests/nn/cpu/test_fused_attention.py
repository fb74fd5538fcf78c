"""The fused C attention kernel against a float64 torch reference with the same dropout mask."""

import pytest
import torch

from graphormer_sepnorm.nn.cpu.native import build, keep_scale
from graphormer_sepnorm.nn.cpu.native import fused_attention as fa

pytestmark = pytest.mark.skipif(not fa.usable(torch.zeros(1), 10),
                                reason="no AVX2 CPU or no C compiler here")
HEADS, HEAD_DIM = 4, 10
DIM = HEADS * HEAD_DIM


def split_heads(qkv_t, batch):
    """Rows ``(s, h, j)`` of ``[3 * D, B * L]`` as q, k and v ``[H * B, d, L]``."""
    length = qkv_t.shape[1] // batch
    return (qkv_t.view(3, HEADS, HEAD_DIM, batch, length).transpose(2, 3)
            .reshape(3, HEADS * batch, HEAD_DIM, length))


def reference(qkv_t, bias_t, batch, p, seed):
    """``[D, B * L]`` attention output, rows ``(h, j)``, in plain torch (any dtype).

    ``qkv_t`` ``[3 * D, B * L]`` has rows ``(s, h, j)``, nn.Linear's order.
    """
    q, k, v = split_heads(qkv_t, batch)
    length = q.shape[-1]
    probs = (HEAD_DIM**-0.5 * q.transpose(1, 2) @ k + bias_t.transpose(1, 2)).softmax(-1)
    if p > 0:
        keep = fa.keep_mask_t(HEADS * batch, length, p, seed).transpose(1, 2)
        probs = probs * keep.to(probs.dtype) * keep_scale(p)
    out = (probs @ v.transpose(1, 2)).transpose(1, 2)  # [G, d, L]
    return out.reshape(HEADS, batch, HEAD_DIM, length).transpose(1, 2).reshape(DIM, -1)


def inputs(batch, length, padded_keys=2, seed=0):
    gen = torch.Generator().manual_seed(seed)
    qkv_t = torch.randn(3 * DIM, batch * length, generator=gen)
    bias_t = torch.randn(HEADS * batch, length, length, generator=gen)
    if padded_keys:
        bias_t[:, -padded_keys:] = float("-inf")  # keys-first: the last keys are padding
    return qkv_t.requires_grad_(), bias_t.requires_grad_()


def run_both(batch, length, p, keep_probs, transposed_grad):
    qkv_t, bias_t = inputs(batch, length, padded_keys=min(2, length - 1))
    torch.manual_seed(3)
    out = fa.fused_attention(qkv_t, bias_t, HEADS, batch, HEAD_DIM**-0.5, p, keep_probs)
    torch.manual_seed(3)  # the kernel's seed is one draw from the global generator
    seed = fa.group_seed(int(torch.randint(0, 2**62, (1,))), 0) if p > 0 else 0
    q64, b64 = (t.detach().double().requires_grad_() for t in (qkv_t, bias_t))
    expected = reference(q64, b64, batch, p, seed)
    # autograd hands the output projection's input gradient over transposed: strided lanes
    grad = (torch.randn(batch * length, DIM).t() if transposed_grad
            else torch.randn(DIM, batch * length))
    out.backward(grad)
    expected.backward(grad.double())
    return (out, qkv_t.grad, bias_t.grad), (expected, q64.grad, b64.grad)


@pytest.mark.parametrize("p", [0.0, 0.25])
@pytest.mark.parametrize("keep_probs", [True, False])
@pytest.mark.parametrize("length", [1, 8, 13])  # one key; whole lane blocks; a partial one
def test_matches_reference_forward_and_backward(p, keep_probs, length):
    fused, expected = run_both(3, length, p, keep_probs, transposed_grad=length == 13)
    for got, want in zip(fused, expected, strict=True):
        torch.testing.assert_close(got.double(), want, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("p", [0.0, 0.25])
def test_groups_in_one_call_match_the_reference_group_by_group(p):
    shapes = [(3, 13), (2, 7), (4, 1)]  # (graphs, tokens) of each group
    parts = [inputs(count, length, padded_keys=min(2, length - 1), seed=k)
             for k, (count, length) in enumerate(shapes)]
    qkv_t = torch.cat([q.detach() for q, _ in parts], dim=1).requires_grad_()
    biases = [b for _, b in parts]
    torch.manual_seed(3)
    out = fa.fused_attention(qkv_t, biases, HEADS, [c for c, _ in shapes], HEAD_DIM**-0.5, p,
                             lengths=[n for _, n in shapes])
    torch.manual_seed(3)
    seed = int(torch.randint(0, 2**62, (1,)))
    grad = torch.randn(qkv_t.shape[1], DIM).t()  # transposed, as autograd hands it over
    out.backward(grad)
    first = 0
    for k, ((count, length), bias_t) in enumerate(zip(shapes, biases, strict=True)):
        columns = slice(first, first + count * length)
        q64 = qkv_t.detach()[:, columns].double().requires_grad_()
        b64 = bias_t.detach().double().requires_grad_()
        expected = reference(q64, b64, count, p, fa.group_seed(seed, k) if p > 0 else 0)
        expected.backward(grad[:, columns].double())
        for got, want in ((out[:, columns], expected), (qkv_t.grad[:, columns], q64.grad),
                          (bias_t.grad, b64.grad)):
            torch.testing.assert_close(got.double(), want, atol=2e-5, rtol=1e-4)
        first += count * length


def test_group_seeds_differ_and_give_independent_masks():
    seeds = [fa.group_seed(7, k) for k in range(4)]
    assert len(set(seeds)) == 4 and all(0 <= s < 2**64 for s in seeds)
    keep = [fa.keep_mask_t(64, 30, 0.1, seed=s) for s in seeds[:2]]
    agree = (keep[0] == keep[1]).float().mean().item()
    assert abs(agree - (0.9**2 + 0.1**2)) < 0.01


def test_padded_keys_get_no_probability_and_no_gradient():
    (out, _, grad_bias), _ = run_both(2, 11, 0.0, True, False)
    assert torch.isfinite(out).all()
    assert torch.equal(grad_bias[:, -2:], torch.zeros_like(grad_bias[:, -2:]))


def test_thread_split_gives_the_same_bits(monkeypatch):
    qkv_t, bias_t = inputs(16, 29)
    grad = torch.randn(DIM, 16 * 29)
    slices = []

    def recording_split(call, total, work, align=1):
        statuses = build.run_split(call, total, work, align)
        slices.append(len(statuses))
        return statuses

    monkeypatch.setattr(fa, "run_split", recording_split)
    results = []
    for count in (1, 2):
        monkeypatch.setattr(torch, "get_num_threads", lambda count=count: count)
        torch.manual_seed(5)
        out = fa.fused_attention(qkv_t, bias_t, HEADS, 16, 0.3, 0.1)
        q_grad, b_grad = torch.autograd.grad(out, (qkv_t, bias_t), grad)
        results.append((out, q_grad, b_grad))
    assert slices == [1, 1, 2, 2]  # forward and backward, on one thread then on two
    for one, two in zip(*results, strict=True):
        assert torch.equal(one, two)


def test_keep_mask_rate_and_independence():
    keep = fa.keep_mask_t(64, 30, 0.1, seed=123)
    assert abs(keep.mean().item() - (1 - 6554 / 65536)) < 0.003
    other = fa.keep_mask_t(64, 30, 0.1, seed=124)
    agree = (keep == other).float().mean().item()
    assert abs(agree - (0.9**2 + 0.1**2)) < 0.01  # two seeds: independent masks
    assert torch.equal(keep, fa.keep_mask_t(64, 30, 0.1, seed=123))


def test_usable_only_for_float32_outside_autocast():
    x = torch.zeros(2, 3, DIM)
    assert fa.usable(x, HEAD_DIM)
    assert not fa.usable(x.double(), HEAD_DIM)
    assert not fa.usable(x, fa.MAX_HEAD_DIM + 1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not fa.usable(x, HEAD_DIM)


def test_probabilities_are_kept_for_backward_only_when_asked_and_needed():
    qkv_t, bias_t = inputs(2, 11)
    out = fa.fused_attention(qkv_t, bias_t, HEADS, 2, HEAD_DIM**-0.5, 0.1)
    probs_t = out.grad_fn.saved_tensors[3]  # after q/k/v, the output and the bias
    q, k, _ = split_heads(qkv_t.detach(), 2)
    expected = (HEAD_DIM**-0.5 * q.transpose(1, 2) @ k + bias_t.detach().transpose(1, 2))
    torch.testing.assert_close(probs_t.abs(), expected.softmax(-1).transpose(1, 2))
    # the dropout mask travels in the sign bits: set where dropped, -0.0 included
    keep = fa.keep_mask_t(HEADS * 2, 11, 0.1, seed=out.grad_fn.meta[4][0])
    assert torch.equal(torch.signbit(probs_t), keep == 0)
    out = fa.fused_attention(qkv_t, bias_t, HEADS, 2, HEAD_DIM**-0.5, 0.1, keep_probs=False)
    assert out.grad_fn.saved_tensors[3] is None  # recomputed in backward instead
    with torch.no_grad():
        assert fa.fused_attention(qkv_t, bias_t, HEADS, 2, HEAD_DIM**-0.5).grad_fn is None
