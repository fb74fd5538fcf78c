"""The graph token's BatchNorm under DDP equals single-process BatchNorm on the whole batch."""

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from graphormer_sepnorm.nn import GraphTokenBatchNorm

ROWS = {0: slice(0, 3), 1: slice(3, 8)}  # unequal shares, as the last batch of an epoch


def inputs():
    gen = torch.Generator().manual_seed(0)
    return torch.randn(8, 4, generator=gen) * 2 + 1, torch.randn(8, 4, generator=gen)


def norm(sync: bool) -> GraphTokenBatchNorm:
    bn = GraphTokenBatchNorm(4, sync=sync)
    with torch.no_grad():
        bn.weight.copy_(torch.tensor([1.0, 2.0, 0.5, -1.0]))
        bn.bias.copy_(torch.tensor([0.0, 0.1, -0.2, 0.3]))
    return bn


def _worker(rank: int, sync: bool, out_dir: str, rows: dict[int, slice]) -> None:
    # A file rendezvous: no port to pick, so no race with other processes for it.
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/rendezvous", rank=rank,
                            world_size=2)
    x, grad = inputs()
    part = x[rows[rank]].clone().requires_grad_()
    bn = norm(sync)
    out = bn(part)
    (out * grad[rows[rank]]).sum().backward()
    torch.save({"out": out.detach(), "grad": part.grad, "weight_grad": bn.weight.grad,
                "running_mean": bn.running_mean, "running_var": bn.running_var,
                "tracked": bn.num_batches_tracked},
               f"{out_dir}/rank{rank}.pt")
    # Without sync no collective runs: one rank could exit while its peer is still connecting
    # gloo's full mesh, and the peer's init then fails with "Connection closed by peer".
    dist.barrier()
    dist.destroy_process_group()


def run_two_processes(sync: bool, tmp_path, rows: dict[int, slice] = ROWS) -> list[dict]:
    mp.spawn(_worker, args=(sync, str(tmp_path), rows), nprocs=2, join=True)
    return [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]


def test_synchronized_statistics_equal_single_process(tmp_path):
    ranks = run_two_processes(True, tmp_path)
    x, grad = inputs()
    x.requires_grad_()
    bn = norm(True)
    out = bn(x)
    (out * grad).sum().backward()
    torch.testing.assert_close(torch.cat([r["out"] for r in ranks]), out.detach())
    torch.testing.assert_close(torch.cat([r["grad"] for r in ranks]), x.grad)
    # each process holds its share of the parameter gradient; DDP sums them
    torch.testing.assert_close(ranks[0]["weight_grad"] + ranks[1]["weight_grad"], bn.weight.grad)
    for r in ranks:
        torch.testing.assert_close(r["running_mean"], bn.running_mean)
        torch.testing.assert_close(r["running_var"], bn.running_var)


def test_without_sync_each_process_uses_its_own_rows(tmp_path):
    ranks = run_two_processes(False, tmp_path)
    x, _ = inputs()
    local = norm(False)(x[ROWS[0]])
    torch.testing.assert_close(ranks[0]["out"], local.detach())
    with pytest.raises(AssertionError):
        torch.testing.assert_close(ranks[0]["out"], norm(False)(x)[ROWS[0]].detach())


def test_a_global_batch_of_one_graph_takes_the_running_statistics(tmp_path):
    # one graph on rank 0, none on rank 1: no batch statistic, so eval mode's, and no update
    ranks = run_two_processes(True, tmp_path, rows={0: slice(0, 1), 1: slice(1, 1)})
    x, grad = inputs()
    expected = norm(True).eval()(x[:1])
    torch.testing.assert_close(ranks[0]["out"], expected.detach())
    for r in ranks:
        torch.testing.assert_close(r["running_mean"], torch.zeros(4))
        torch.testing.assert_close(r["running_var"], torch.ones(4))
        assert int(r["tracked"]) == 0
    assert len(ranks[1]["out"]) == 0
