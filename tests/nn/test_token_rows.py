"""Token rows: the encoder's token-wise work on real tokens only, attention on the grid.

The contract: from a grid batch with token rows the model computes what it computes from the
same grid batch without them, in float64 (outputs, real tokens, every gradient, BatchNorm
statistics), for both edge encodings and both norms, training and evaluation, the whole encoder
and the graph token only, one model and packed replicas; the row maps are checked by hand.
The same for attention sequences (several graphs to a sequence, a block-diagonal bias), against
a grid batch of the graphs in their sequences' order.
"""

import copy

import numpy as np
import pytest
import torch
from data.test_grid import mixed_graphs
from graphs import random_graph
from nn.test_backends import assert_same, model_pair, run

from graphormer_sepnorm.data import sequences
from graphormer_sepnorm.data.grid import GridGraphs, row_maps
from graphormer_sepnorm.nn import token_rows as rows_module
from graphormer_sepnorm.training.packed import PackedReplicas


def test_row_maps_by_hand() -> None:
    # graphs of 2, 3 and 1 atoms in a grid of 3 atoms (4 token positions each), 8 atom rows
    row_position, position_row = row_maps(torch.tensor([2, 3, 1]), length=3, atom_rows=8)
    assert row_position.tolist() == [0, 4, 8,  # the graph tokens
                                     1, 2, 5, 6, 7, 9,  # the atoms, in grid order
                                     9, 10]  # padding rows: row r at position r mod 12
    # padded positions p: row p mod 11 (spread, not all on one row: see row_maps)
    assert position_row.view(3, 4).tolist() == [[0, 3, 4, 3], [1, 5, 6, 7], [2, 8, 10, 0]]
    stacked, _ = row_maps(torch.tensor([[2, 3, 1], [1, 1, 1]]), length=3, atom_rows=8)
    assert stacked[0].tolist() == row_position.tolist()
    assert stacked[1].tolist() == [0, 4, 8, 1, 5, 9, 6, 7, 8, 9, 10]


def test_row_maps_are_inverse_on_real_tokens() -> None:
    store = GridGraphs(mixed_graphs(), multi_hop_max_dist=5)
    index = torch.tensor([7, 1, 9, 0, 4])
    batch = store.batch(index, length=32, atom_rows=96)
    real = int(store.sizes[index.numpy()].sum()) + len(index)
    assert batch.row_position.shape == (5 + 96,) and batch.position_row.shape == (5 * 33,)
    assert torch.equal(batch.position_row[batch.row_position[:real]], torch.arange(real))
    grid = torch.cat([torch.ones(5, 1, dtype=torch.bool), batch.node_mask], 1).flatten()
    assert sorted(batch.row_position[:real].tolist()) == grid.nonzero().squeeze(1).tolist()
    # padding goes everywhere, never piled on one row or position
    assert batch.position_row[~grid].bincount().max() <= 2
    assert batch.row_position[real:].bincount().max() <= 2


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("options", [dict(), dict(edge_encoding="simple"), dict(sepnorm=False),
                                     dict(cls_norm="layer")])
def test_rows_compute_what_the_grid_does(train, options, monkeypatch) -> None:
    graphs = mixed_graphs()
    grid_model, _ = model_pair(torch.float64, multi_hop_max_dist=5, **options)
    rows_model = copy.deepcopy(grid_model)
    store = GridGraphs(graphs, multi_hop_max_dist=5)
    index = torch.arange(len(graphs))
    length = store.length_for(index.numpy())
    atom_rows = int(store.sizes.sum()) + 7  # a few padding rows
    calls = []
    original = rows_module.encode
    monkeypatch.setattr(rows_module, "encode", lambda *a: calls.append(1) or original(*a))
    for graph_token_only in (False, True):
        expected = run(grid_model, store.batch(index, length), train, graph_token_only)
        got = run(rows_model, store.batch(index, length, atom_rows), train, graph_token_only)
        assert_same(expected, got, 1e-10)
    assert len(calls) == 2


def test_rows_leave_atom_batch_norms_to_the_grid() -> None:
    model, _ = model_pair(torch.float64, multi_hop_max_dist=5, cls_norm="layer",
                          tok_norm="batch")
    store = GridGraphs(mixed_graphs(), multi_hop_max_dist=5)
    index = torch.arange(4)
    batch = store.batch(index, 32, atom_rows=80)
    assert not rows_module.applies(model, batch)
    assert rows_module.applies(model_pair(torch.float64)[0], batch)
    assert not rows_module.applies(model, store.batch(index, 32))
    torch.testing.assert_close(model.eval()(batch), model(store.batch(index, 32)))


def test_packed_replicas_on_rows_compute_what_they_do_on_the_grid() -> None:
    graphs = mixed_graphs()
    model, _ = model_pair(torch.float64, multi_hop_max_dist=5)
    store = GridGraphs(graphs, multi_hop_max_dist=5)
    index = torch.tensor([[0, 1, 2, 3, 4], [9, 8, 7, 6, 5]])
    outputs, grads = [], []
    for atom_rows in (None, 80):  # 68 atoms in the first replica's batch
        packed = PackedReplicas([copy.deepcopy(model), copy.deepcopy(model)]).train()
        out = packed(store.batch(index, 32, atom_rows))
        out.pow(2).sum().backward()
        outputs.append(out.detach())
        grads.append(packed.flat.grad.clone())
        statistics = [packed.stacked_buffer(n).clone() for n in packed.buffer_names
                      if "running" in n]
        grads.append(torch.cat([s.flatten() for s in statistics]))
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(grads[0], grads[2], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(grads[1], grads[3], rtol=1e-10, atol=1e-10)


def test_atom_rows_cover_random_batches() -> None:
    rng = np.random.default_rng(0)
    graphs = [random_graph(int(n), seed=s, p=0.2) for s, n in
              enumerate(rng.integers(5, 40, 300))]
    store = GridGraphs(graphs, multi_hop_max_dist=3)
    atom_rows = store.atom_rows_for(32)
    assert atom_rows % 64 == 0 and atom_rows < 32 * store.sizes.max()
    totals = [store.sizes[rng.choice(300, 32, replace=False)].sum() for _ in range(2000)]
    assert max(totals) <= atom_rows
    assert np.mean(totals) < atom_rows < np.mean(totals) + 7 * np.std(totals) + 64
    largest = np.argsort(store.sizes)[-32:]
    assert store.rows_for(largest, atom_rows, 40) == 32 * 40  # too many atoms: the grid's
    assert store.rows_for(largest[None, :8], atom_rows, 40) == atom_rows
    # never more rows than the grid has atom positions
    assert GridGraphs(graphs[:3], multi_hop_max_dist=3).atom_rows_for(2) <= 2 * 39


def sequence_batches(store: GridGraphs, index: np.ndarray, atom_rows: int):
    """A grid batch and a sequences batch of the same graphs, in the packing's order."""
    count, length = sequences.shape_for(store.sizes, index.shape[-1])
    order, first = map(torch.from_numpy, sequences.place(store.sizes, index, count, length))
    return (store.batch(order, 32),
            store.batch(order, 32, atom_rows, sequences=(first, count, length)))


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("options", [dict(), dict(edge_encoding="simple"), dict(sepnorm=False),
                                     dict(cls_norm="layer")])
def test_sequences_compute_what_the_grid_does(train, options) -> None:
    grid_model, _ = model_pair(torch.float64, multi_hop_max_dist=5, **options)
    sequence_model = copy.deepcopy(grid_model)
    store = GridGraphs(mixed_graphs(), multi_hop_max_dist=5)
    grid, placed = sequence_batches(store, np.arange(len(store)), int(store.sizes.sum()) + 7)
    assert placed.sequence_graph.shape[0] < len(store)  # several graphs to a sequence
    for graph_token_only in (False, True):
        expected = run(grid_model, grid, train, graph_token_only)
        got = run(sequence_model, placed, train, graph_token_only)
        assert_same(expected, got, 1e-10)


def test_sequences_need_token_rows() -> None:
    model, _ = model_pair(torch.float64, multi_hop_max_dist=5, cls_norm="layer",
                          tok_norm="batch")
    store = GridGraphs(mixed_graphs(), multi_hop_max_dist=5)
    _, placed = sequence_batches(store, np.arange(4), 80)
    with pytest.raises(ValueError, match="attention sequences"):
        model(placed)


def test_packed_replicas_on_sequences_compute_what_they_do_on_the_grid() -> None:
    model, _ = model_pair(torch.float64, multi_hop_max_dist=5)
    store = GridGraphs(mixed_graphs(), multi_hop_max_dist=5)
    outputs, grads = [], []
    for batch in sequence_batches(store, np.array([[0, 1, 2, 3, 4], [9, 8, 7, 6, 5]]), 80):
        packed = PackedReplicas([copy.deepcopy(model), copy.deepcopy(model)]).train()
        out = packed(batch)
        out.pow(2).sum().backward()
        outputs.append(out.detach())
        grads.append(packed.flat.grad.clone())
        grads.append(torch.cat([packed.stacked_buffer(n).flatten() for n in packed.buffer_names
                                if "running" in n]))
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(grads[0], grads[2], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(grads[1], grads[3], rtol=1e-10, atol=1e-10)
