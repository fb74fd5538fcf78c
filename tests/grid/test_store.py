"""The grid layout: static-shape batches gathered from graphs stored on the device.

The reference model computes the same function from a grid batch as from the collator's batch
of the same graphs (float64, outputs, gradients, BatchNorm statistics), for both edge encodings
and both norms; the batch's shapes depend on ``B``, ``N`` and ``S`` only.
"""

import copy

import numpy as np
import pytest
import torch
from graphs import random_graph
from nn.test_backends import NO_DROPOUT, assert_same, model_pair, run, single_atom

from graphormer_sepnorm.data import GraphormerCollator, SizeGroupedBatchSampler
from graphormer_sepnorm.grid import DeviceBatches, GridBatch, GridGraphs, store
from graphormer_sepnorm.nn import set_backend
from graphormer_sepnorm.nn.compiling import compile_kwargs


def mixed_graphs():
    """Sizes 1 to 30, two disconnected graphs, a lone atom (as the backend contract's batch)."""
    graphs = [random_graph(n, s, p=0.3, y=float(s)) for s, n in
              enumerate([3, 30, 5, 22, 8, 4, 12])]
    graphs += [random_graph(9, seed=40, p=0.05, y=1.0), random_graph(14, seed=41, p=0.08, y=2.0)]
    lone = single_atom()
    lone.y = torch.tensor([3.0])
    return [*graphs, lone]


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("options", [dict(), dict(edge_encoding="simple"), dict(sepnorm=False),
                                     dict(cls_norm="layer", tok_norm="batch")])
def test_grid_batch_computes_what_the_collated_batch_does(train, options) -> None:
    graphs = mixed_graphs()
    reference, _ = model_pair(torch.float64, multi_hop_max_dist=5, **options)
    grid_model = copy.deepcopy(reference)
    collated = GraphormerCollator(multi_hop_max_dist=5)(graphs)
    store = GridGraphs(graphs, multi_hop_max_dist=5)
    index = torch.arange(len(graphs))
    grid = store.batch(index, store.length_for(index.numpy()))
    assert isinstance(grid, GridBatch) and not grid.stacked
    assert grid.node_mask.shape == (len(graphs), 32)  # 30 atoms rounded up to 8
    torch.testing.assert_close(grid.y, collated.y)
    for graph_token_only in (False, True):
        assert_same(run(reference, collated, train, graph_token_only),
                    run(grid_model, grid, train, graph_token_only), 1e-10)


def test_grid_batch_gathers_any_subset_in_any_order() -> None:
    graphs = mixed_graphs()
    reference, _ = model_pair(torch.float64, multi_hop_max_dist=5)
    reference.eval()
    store = GridGraphs(graphs, multi_hop_max_dist=5)
    order = [8, 3, 9, 0]
    expected = reference(GraphormerCollator(5)([graphs[i] for i in order]))
    got = reference(store.batch(torch.tensor(order), length=40))  # more padding than needed
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)


def test_grid_shapes_depend_on_batch_size_and_length_only() -> None:
    graphs = [random_graph(int(n), seed=s, p=0.2, y=0.0)
              for s, n in enumerate(np.random.default_rng(0).integers(1, 20, 60))]
    store = GridGraphs(graphs, multi_hop_max_dist=4)
    gen = torch.Generator().manual_seed(0)
    shapes = set()
    for _ in range(5):
        index = torch.randperm(len(graphs), generator=gen)[:16]
        batch = store.batch(index, length=24)
        shapes.add(tuple((name, tuple(value.shape)) for name, value in vars(batch).items()
                         if isinstance(value, torch.Tensor)))
    assert len(shapes) == 1
    shape = dict(next(iter(shapes)))
    assert shape["x"] == (16 * 24, 2) and shape["hop_edge"] == (16 * 24 * 24, store.hop_slots)
    assert store.hop_slots <= 4 and store.nbytes > 0


def test_grid_batch_with_leading_replica_dimension() -> None:
    """``[R, B]`` indices give every field a leading ``R``; each slice is that replica's batch."""
    graphs = mixed_graphs()
    store = GridGraphs(graphs, multi_hop_max_dist=5)
    index = torch.tensor([[0, 1, 2], [9, 8, 7]])
    packed = store.batch(index, length=32)
    for replica in range(2):
        single = store.batch(index[replica], length=32)
        for name, value in vars(single).items():
            if isinstance(value, torch.Tensor):
                torch.testing.assert_close(getattr(packed, name)[replica], value, msg=name)
    # stacking is a field the store sets, never read from the tensors' ranks
    assert packed.stacked and not single.stacked and packed.to("cpu").stacked
    assert packed.num_graphs == single.num_graphs == 3


def test_grid_length_rounds_up() -> None:
    store = GridGraphs(mixed_graphs())
    assert store.length_for(np.array([0, 2])) == 8  # 3 and 5 atoms
    assert store.length_for(np.array([1])) == 32
    assert store.length_for(np.array([9]), multiple=1) == 1


def test_cpu_backend_leaves_grid_batches_to_the_reference() -> None:
    graphs = mixed_graphs()
    reference, cpu = model_pair(torch.float64, multi_hop_max_dist=5)
    grid = GridGraphs(graphs, multi_hop_max_dist=5).batch(torch.arange(len(graphs)), 32)
    torch.testing.assert_close(set_backend(cpu, "auto").eval()(grid), reference.eval()(grid))
    with pytest.raises(ValueError, match="grid engine"):
        set_backend(cpu, "cpu")(grid)


def test_grid_of_graphs_without_edges() -> None:
    lone = single_atom()
    store = GridGraphs([lone, lone])
    reference, _ = model_pair(torch.float64, **NO_DROPOUT)
    out = reference.eval()(store.batch(torch.tensor([0, 1]), length=1))
    torch.testing.assert_close(out, reference(GraphormerCollator()([lone, lone])))


def test_device_batches_draw_each_replicas_own_order_per_epoch() -> None:
    graphs = mixed_graphs()
    store = GridGraphs(graphs, multi_hop_max_dist=5)
    sizes = [g.num_nodes for g in graphs]
    samplers = [SizeGroupedBatchSampler(sizes, 4, seed=s, drop_last=True) for s in (0, 7)]
    batches = DeviceBatches(store, samplers, stack=True)
    assert len(batches) == 2
    first = list(batches)
    assert [b.node_mask.shape[:2] for b in first] == [(2, 4)] * 2
    # each row is that replica's sampler's batch, padded to the step's largest molecule
    for step, batch in enumerate(first):
        rows = [list(s)[step] for s in samplers]
        assert batch.node_mask.shape[-1] == store.length_for(np.array(rows).reshape(-1))
        assert batch.node_mask.sum(-1).tolist() == [[sizes[i] for i in r] for r in rows]
    assert not torch.equal(first[0].node_mask[0], first[0].node_mask[1])
    batches.sampler.set_epoch(1)  # as Lightning does: another draw
    assert any(not torch.equal(a.node_mask, b.node_mask) for a, b in zip(first, batches,
                                                                          strict=True))


def test_device_batches_of_one_length_pad_every_batch_to_it() -> None:
    """``length``: one shape for every batch (a compiled step compiles once); never shorter
    than the largest molecule."""
    graphs = mixed_graphs()
    store = GridGraphs(graphs, multi_hop_max_dist=5)
    sizes = [g.num_nodes for g in graphs]
    sampler = SizeGroupedBatchSampler(sizes, 3, seed=1, drop_last=True, pool_batches=3)
    bucketed = list(DeviceBatches(store, [sampler]))
    assert len({b.node_mask.shape[-1] for b in bucketed}) > 1  # size-sorted: several lengths
    fixed = list(DeviceBatches(store, [sampler], length=40))
    assert [b.node_mask.shape for b in fixed] == [(3, 40)] * len(bucketed)
    for short, long in zip(bucketed, fixed, strict=True):  # the same graphs, only more padding
        n = short.node_mask.shape[-1]
        assert torch.equal(long.node_mask[:, :n], short.node_mask)
        assert not long.node_mask[:, n:].any() and torch.equal(long.y, short.y)
    with pytest.raises(ValueError, match="shorter than the largest molecule"):
        DeviceBatches(store, [sampler], length=max(sizes) - 1)


def test_device_batches_want_stacking_for_several_samplers() -> None:
    graphs = mixed_graphs()
    sampler = SizeGroupedBatchSampler([g.num_nodes for g in graphs], 3, seed=2)
    with pytest.raises(ValueError, match="stack=True"):
        DeviceBatches(GridGraphs(graphs), [sampler, sampler])


def test_grid_batch_carries_molecule_features() -> None:
    graphs = mixed_graphs()[:4]
    for k, graph in enumerate(graphs):
        graph.mol_x = torch.full((1, 3), float(k))
    store = GridGraphs(graphs, multi_hop_max_dist=5)
    batch = store.batch(torch.tensor([2, 0]), length=32)
    torch.testing.assert_close(batch.mol_x, torch.tensor([[2.0] * 3, [0.0] * 3]))
    assert GridGraphs(mixed_graphs()[:2], multi_hop_max_dist=5).mol_x is None


def test_compiled_gather_gives_the_eager_batch(monkeypatch) -> None:
    """On CUDA the gathers are compiled (dynamic shapes); traced here on the CPU."""
    graphs = GridGraphs(mixed_graphs(), multi_hop_max_dist=5)
    calls, real_compile = [], torch.compile
    monkeypatch.setattr(store, "gathers_compiled", lambda device: True)
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: calls.append(kw) or real_compile(
        fn, backend="aot_eager", **kw))
    cases = ((torch.tensor([0, 3, 9]), 32), (torch.tensor([[1, 2], [8, 0]]), 40),
             (torch.tensor([[1, 2, 3, 5], [8, 0, 4, 9]]), 32))
    compiled = [graphs.batch(*case) for case in cases]
    assert calls == [compile_kwargs(dynamic=True)]  # compiled once, for every shape
    monkeypatch.setattr(store, "gathers_compiled", lambda device: False)
    for got, case in zip(compiled, cases, strict=True):
        expected = graphs.batch(*case)
        for name, value in vars(expected).items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(getattr(got, name), value), name
    # a compiled model takes the compiled gather's batch (no view of its outputs reaches it)
    model, _ = model_pair(torch.float32, multi_hop_max_dist=5)
    compiled_model = real_compile(model, backend="aot_eager")
    torch.testing.assert_close(compiled_model.eval()(compiled[0]), model.eval()(compiled[0]))
