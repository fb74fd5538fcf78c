"""benchmarks/gpu_roofline.py counts a tiny packed step on the CPU and prints its summary line."""

import re
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gpu_roofline  # noqa: E402


def test_gpu_roofline_smoke_run_prints_the_summary_line(capsys):
    rows = gpu_roofline.main(["--synthetic", "32", "--batch-scale", "0.03", "--layers", "1",
                              "--k", "2", "--no-engine"])
    assert [(r["dataset"], r["path"]) for r in rows] == [("zinc_subset", "packed 2"),
                                                         ("molhiv", "packed 2")]
    for row in rows:
        assert row["graph_launches"] > 0 and row["bytes"] > 0 and row["flops"] > 0
        assert row["launches"] == row["graph_launches"] + row["eager_launches"]
        assert row["recompiles"] == 0  # the second step runs what the first compiled
        if row["length"] != "mix":  # one padded length: the rate is its binding bound's
            step_ms = max(row["launches_ms"], row["bytes_ms"], row["flops_ms"])
            assert row["model_steps_per_s"] == pytest.approx(2 / step_ms * 1e3, rel=1e-12)
        else:  # several, each compiled afresh: the shares sum to one
            assert sum(row["lengths"].values()) == pytest.approx(1.0)
        assert 0 < row["hbm_bytes"] <= row["bytes"]  # L2 reuse only removes reads
        assert row["l2_model_steps_per_s"] >= row["model_steps_per_s"]
        # kernels in turn take at least as long as the largest of the step's three bounds
        bounds = [row[f"{k}_ms"] for k in ("launches", "bytes", "flops")]
        assert row["serial_ms"] >= max(bounds) * (1 - 1e-9)
        assert row["serial_model_steps_per_s"] <= row["model_steps_per_s"] * (1 + 1e-9)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert re.fullmatch(r"gpu_roofline launches_k2=\d+ launches_k8=n/a table_min=[\d.]+ "
                        r"molhiv_min=[\d.]+ table_min_l2=[\d.]+ molhiv_min_l2=[\d.]+ "
                        r"table_min_serial=[\d.]+ molhiv_min_serial=[\d.]+", last), last


def test_gpu_roofline_pads_as_the_preset_does():
    """The preset's ``train_length: longest``: every step at the split's largest length, one
    compile; ``bucketed``: the lengths random steps take."""
    args = ["--synthetic", "64", "--batch-scale", "0.03", "--layers", "1", "--k", "2",
            "--no-engine", "--datasets", "molhiv"]
    assert gpu_roofline.preset_train_length() == "longest"
    longest = gpu_roofline.main(args)[0]
    graphs = gpu_roofline.synthetic("molhiv", 64)
    store = gpu_roofline.GridGraphs(graphs, multi_hop_max_dist=gpu_roofline.HOPS["molhiv"])
    assert longest["length"] == int(store.lengths()[-1])
    bucketed = gpu_roofline.main([*args, "--train-length", "bucketed"])[0]
    assert bucketed["length"] == "mix" and max(bucketed["lengths"]) <= longest["length"]


class _Node:
    """A scheduled kernel as hbm_bytes reads it: the buffers it reads and writes, in bytes."""

    def __init__(self, reads: dict[str, int], writes: dict[str, int]) -> None:
        self.reads, self.writes = reads, writes

    def get_read_write_buffer_accesses(self, include_reads: bool, include_writes: bool):
        return {**(self.reads if include_reads else {}), **(self.writes if include_writes else {})}


def test_hbm_bytes_lets_recent_buffers_hit_l2():
    from _roofline import hbm_bytes

    nodes = [_Node({"input": 10}, {"a": 10}),  # input from HBM, a written
             _Node({"a": 10}, {"b": 10}),  # a just written: a hit
             _Node({"input": 10, "b": 10}, {"c": 10})]  # input and b touched recently
    assert hbm_bytes(nodes, capacity=100) == 10 + 10 + 10 + 10
    # room for one buffer: a is still there for the second kernel, input is not for the third
    assert hbm_bytes(nodes, capacity=10) == 10 + 10 + 10 + 10 + 10
    assert hbm_bytes(nodes, capacity=0) == 10 + 10 + 10 + 10 + 10 + 10 + 10


def test_the_recorder_groups_independent_kernels_as_cuda_combo_kernels():
    """Inductor leaves the CPU's kernels out of combo kernels; the recorder counts them as
    CUDA's would be grouped (each set of independent kernels, up to 8 to a launch)."""
    from _roofline import InductorRecorder

    def three(a, b, c):
        return a.sin(), b.cos() * 2, c.exp()

    inputs = (torch.randn(7), torch.randn(5, 3), torch.randn(11))
    kernels = {}
    for combo in (False, True):
        with InductorRecorder() as recorder:
            torch.compile(three, options={"combo_kernels": combo})(*inputs)
        kernels[combo] = sum(g.kernels for g in recorder.graphs)
    assert kernels == {False: 3, True: 1}


def _step_bytes(function, *inputs) -> int:
    from _roofline import InductorRecorder

    with InductorRecorder() as recorder:
        torch.compile(function)(*inputs)
    return sum(g.bytes for g in recorder.graphs)


def test_a_combo_kernels_own_intermediates_are_not_written():
    """A reduction fused with the pointwise work that reads it (a centred row, as a
    LayerNorm's) keeps the row means in the kernel, also when a combo kernel runs it beside
    other work: only inputs and outputs move."""
    from _roofline import InductorRecorder

    x, y = torch.randn(4096, 32), torch.randn(1000)

    def centred(x, y):
        return (x - x.mean(1, keepdim=True)).sin(), y.cos()

    def centred_and_means(x, y):  # the means leave the kernel: written
        mean = x.mean(1, keepdim=True)
        return (x - mean).sin(), y.cos(), mean

    for function, means in ((centred, 0), (centred_and_means, 4096)):
        with InductorRecorder() as recorder:
            torch.compile(function, options={"combo_kernels": True})(x, y)
        assert sum(g.kernels for g in recorder.graphs) == 1
        assert sum(g.bytes for g in recorder.graphs) == 4 * (2 * 4096 * 32 + 2 * 1000 + means)


def test_reads_of_part_of_a_buffer_count_that_part():
    """A matmul's weight and a kernel's broadcast bias read from a large flat buffer (as the
    packed replicas' parameters are) count their own elements, not the whole buffer; a gather
    from it keeps inductor's worst case."""
    flat, x = torch.randn(100_000), torch.randn(64, 32)
    index = torch.randint(0, 100_000, (64, 32))

    def matmul(flat, x):
        return x @ flat[1000:1512].view(32, 16)

    def broadcast(flat, x):
        return x.sin() + flat[5000:5032]

    def gather(flat, index):
        return flat[index].cos()

    assert _step_bytes(matmul, flat, x) == 4 * (32 * 16 + 64 * 32 + 64 * 16)
    assert _step_bytes(broadcast, flat, x) == 4 * (32 + 2 * 64 * 32)
    # inductor's count for an indirect read: the kernel's elements, at most the buffer's
    assert _step_bytes(gather, flat, index) == 4 * (64 * 32) + 8 * 64 * 32 + 4 * 64 * 32


def test_pair_share_counts_the_sectors_of_each_querys_run_of_keys():
    from _roofline import PairShare

    # heads last, 8 heads of bf16: a key is 16 bytes, half a 32-byte sector; a query's row 64
    graph = torch.tensor([[0, 0, 0, -1], [1, 1, 2, -1]])
    share = PairShare.of(graph, heads=8, item_size=2)
    # graph 0: 3 queries, keys 0-2 (48 bytes: 2 sectors, the second in part); graph 1: 2
    # queries, keys 0-1 (one whole sector); graph 2: 1 query, key 2 (half a sector); padding
    # reads nothing; of 2 x 4 x 64 / 32 = 16 sectors
    assert share.read == (3 * 2 + 2 * 1 + 1) / 16
    assert share.write == (3 * 3 + 2 * 1 + 2) / 16  # a sector written in part is read first
    assert PairShare.of(graph[None], 8, 2) == share  # packed replicas' [R, S, L]


def test_the_row_attention_op_moves_its_bias_at_the_pairs_of_one_graph():
    """Its bias is read forward and backward and its gradient written at :data:`PAIR_SHARE`
    of their bytes; the rest of the op's tensors whole."""
    import _roofline

    from graphormer_sepnorm.nn import row_attention

    count, length, heads = 4, 16, 2
    graph = torch.arange(count * length).div(8, rounding_mode="floor").view(count, length)
    rows = torch.arange(count * length)
    x, weight = torch.randn(count * length, 8), torch.randn(24, 8, requires_grad=True)
    qkv_bias, bias = torch.randn(24), torch.randn(count, length, length, heads)

    def step(weight, bias):
        out = row_attention.attend(x, weight, qkv_bias, rows, rows, graph, bias, 0.0, 0.5)
        out.sum().backward()

    totals = []
    for share in (_roofline.PairShare(), _roofline.PairShare(0.5, 0.75)):
        with _roofline.InductorRecorder() as recorder:
            _roofline.PAIR_SHARE = share
            torch.compile(step)(weight, bias.clone().requires_grad_())
        assert _roofline.PAIR_SHARE == _roofline.PairShare()  # the recorder's exit resets it
        totals.append(sum(g.bytes for g in recorder.graphs))
    whole = bias.numel() * 4
    assert totals[0] - totals[1] == 2 * whole * 0.5 + whole * 0.25
    assert _roofline.PairShare.of(graph, heads, 4) == _roofline.PairShare(0.5, 0.5)
