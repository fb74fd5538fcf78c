import pytest
import torch
import torch.nn.functional as F

from graphormer_sepnorm.nn import GraphTokenBatchNorm, SepNorm, ShareNorm, build_norm


def padded_input(b=4, n=5, d=6):
    x = torch.randn(b, 1 + n, d) * 3 + 1
    mask = torch.ones(b, n, dtype=torch.bool)
    mask[0, 3:] = False
    mask[2, 1:] = False
    return x, mask


def test_train_mode_graph_token_uses_batch_statistics_and_atoms_layer_norm():
    x, mask = padded_input()
    norm = SepNorm(6).train()
    out = norm(x, mask)
    cls = x[:, 0]
    expected = (cls - cls.mean(0)) / torch.sqrt(cls.var(0, unbiased=False) + 1e-5)
    torch.testing.assert_close(out[:, 0], expected)
    torch.testing.assert_close(out[:, 1:], F.layer_norm(x[:, 1:], (6,)))
    # running statistics: momentum 0.1 towards the batch mean and the unbiased variance
    torch.testing.assert_close(norm.cls_norm.running_mean, 0.1 * cls.mean(0))
    torch.testing.assert_close(norm.cls_norm.running_var, 0.9 + 0.1 * cls.var(0, unbiased=True))


def test_eval_mode_output_of_a_graph_does_not_depend_on_its_batch():
    x, mask = padded_input()
    norm = SepNorm(6)
    norm(x, mask)  # one training step moves the running statistics
    norm.eval()
    together = norm(x, mask)
    alone = norm(x[1:2], mask[1:2])
    torch.testing.assert_close(together[1:2], alone)
    rm, rv = norm.cls_norm.running_mean, norm.cls_norm.running_var
    torch.testing.assert_close(together[:, 0], (x[:, 0] - rm) / torch.sqrt(rv + 1e-5))


def test_single_graph_training_batch_uses_running_statistics_without_updating_them():
    norm = SepNorm(6).train()
    x = torch.randn(1, 4, 6)
    norm.cls_norm.running_mean.fill_(0.5)
    out = norm(x)
    torch.testing.assert_close(out[0, 0], (x[0, 0] - 0.5) / torch.sqrt(torch.tensor(1 + 1e-5)))
    assert torch.equal(norm.cls_norm.running_mean, torch.full((6,), 0.5))
    assert int(norm.cls_norm.num_batches_tracked) == 0


def test_padding_never_enters_token_batch_statistics():
    x, mask = padded_input()
    norm = SepNorm(6, cls_norm="layer", tok_norm="batch").train()
    out = norm(x, mask)
    atoms = x[:, 1:][mask]
    expected = (atoms - atoms.mean(0)) / torch.sqrt(atoms.var(0, unbiased=False) + 1e-5)
    torch.testing.assert_close(out[:, 1:][mask], expected)
    garbage = x.clone()
    garbage[:, 1:][~mask] = 1e6
    torch.testing.assert_close(norm(garbage, mask)[:, 1:][mask], expected)
    torch.testing.assert_close(out[:, 0], F.layer_norm(x[:, 0], (6,)))


def test_cls_norm_none_and_share_norm():
    x, mask = padded_input()
    out = SepNorm(6, cls_norm="none")(x, mask)
    assert torch.equal(out[:, 0], x[:, 0])
    share = ShareNorm(6)
    torch.testing.assert_close(share(x, mask), F.layer_norm(x, (6,)))
    assert isinstance(build_norm(6, sepnorm=False), ShareNorm)
    assert isinstance(build_norm(6, sepnorm=True), SepNorm)


def test_unknown_norm_kind_is_rejected():
    with pytest.raises(ValueError, match="cls_norm"):
        SepNorm(6, cls_norm="group")


def test_batch_norm_statistics_stay_float32_under_autocast():
    bn = GraphTokenBatchNorm(6).train()
    x = torch.randn(8, 6).to(torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = bn(x)
    assert out.dtype == torch.bfloat16
    assert bn.running_mean.dtype == torch.float32
    expected = (x.float() - x.float().mean(0)) / torch.sqrt(x.float().var(0, unbiased=False) + 1e-5)
    torch.testing.assert_close(out.float(), expected, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("synchronized", [False, True])
def test_training_without_tracking_normalizes_alike_and_leaves_the_statistics(
        synchronized, monkeypatch):
    if synchronized:  # the DDP path, on one process: the global moments are the local ones
        monkeypatch.setattr("graphormer_sepnorm.nn.sepnorm.is_distributed", lambda: True)
        monkeypatch.setattr("graphormer_sepnorm.nn.sepnorm.global_batch_moments", lambda x: (
            x.mean(0), x.var(0, unbiased=False), torch.tensor(float(len(x)),
                                                              dtype=torch.float64)))
    x = torch.randn(8, 6, dtype=torch.float64) * 2 + 1
    tracking, quiet = GraphTokenBatchNorm(6).double(), GraphTokenBatchNorm(6).double()
    quiet.tracks_in_training = False
    with torch.no_grad():
        for bn in (tracking, quiet):
            bn.weight.copy_(torch.linspace(0.5, 2.0, 6))
            bn.bias.copy_(torch.linspace(-1.0, 1.0, 6))
            bn.running_mean.fill_(0.25)
    outputs = []
    for bn in (tracking, quiet):
        inp = x.clone().requires_grad_()
        out = bn.train()(inp)
        (out * torch.arange(48.0, dtype=torch.float64).view(8, 6)).sum().backward()
        outputs.append((out.detach(), inp.grad, bn.weight.grad, bn.bias.grad))
    for ours, theirs in zip(outputs[1], outputs[0], strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    assert not torch.equal(tracking.running_mean, torch.full((6,), 0.25, dtype=torch.float64))
    assert torch.equal(quiet.running_mean, torch.full((6,), 0.25, dtype=torch.float64))
    assert torch.equal(quiet.running_var, torch.ones(6, dtype=torch.float64))
    assert int(quiet.num_batches_tracked) == 0 and int(tracking.num_batches_tracked) == 1
    # the statistics pass (momentum None) always averages the batches in
    quiet.momentum = None
    quiet(x)
    torch.testing.assert_close(quiet.running_mean, x.mean(0))
    assert int(quiet.num_batches_tracked) == 1
