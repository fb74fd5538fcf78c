"""Attention sequences: the host's packing, the device's maps, checked by hand."""

import numpy as np
import pytest
import torch
from data.test_grid import mixed_graphs

from graphormer_sepnorm.data import sequences
from graphormer_sepnorm.data.grid import GridGraphs


def test_pack_by_hand() -> None:
    # molecules of 3, 5, 2, 4 and 1 tokens into 2 sequences of 8, longest first, each into the
    # least filled: 5 -> 0, 4 -> 1, 3 -> 1, 2 -> 0, 1 -> 0 (the first of two equally filled)
    order, first = sequences.pack(np.array([3, 5, 2, 4, 1]), count=2, length=8)
    assert order.tolist() == [1, 2, 4, 0, 3]  # by sequence, then by batch order
    assert first.tolist() == [0, 5, 7, 8, 11]  # sequence 0 full; sequence 1 has one free
    assert sequences.pack(np.array([3, 5, 2, 4, 1]), count=2, length=7) is None
    assert sequences.pack(np.array([9]), count=2, length=8) is None


def test_sequence_maps_by_hand() -> None:
    # the packing above: graphs of 4, 1, 0, 2 and 3 atoms, 12 atom rows (10 real)
    num_nodes, first = torch.tensor([4, 1, 0, 2, 3]), torch.tensor([0, 5, 7, 8, 11])
    row_sequence, sequence_row, graph = sequences.sequence_maps(num_nodes, first, 2, 8, 12)
    assert row_sequence.tolist() == [0, 5, 7, 8, 11,  # graph tokens
                                     1, 2, 3, 4, 6, 9, 10, 12, 13, 14,  # atoms, graph order
                                     15, 0]  # padding rows: (B + r) mod 16
    assert sequence_row.view(2, 8).tolist() == [[0, 5, 6, 7, 8, 1, 9, 2],
                                                [3, 10, 11, 4, 12, 13, 14, 15]]
    assert graph.view(2, 8).tolist() == [[0, 0, 0, 0, 0, 1, 1, 2], [3, 3, 3, 4, 4, 4, 4, -1]]
    stacked = sequences.sequence_maps(torch.stack([num_nodes, num_nodes]),
                                      torch.stack([first, first]), 2, 8, 12)
    assert stacked[0][1].tolist() == row_sequence.tolist()


def test_sequence_batches_place_each_pair() -> None:
    graphs = mixed_graphs()
    store = GridGraphs(graphs, multi_hop_max_dist=5)
    index = np.arange(len(graphs))
    count, length = sequences.shape_for(store.sizes, len(graphs))
    order, first = sequences.pack(store.sizes[index] + 1, count, length)
    batch = store.batch(torch.from_numpy(index[order]), 32, atom_rows=120,
                        sequences=(torch.from_numpy(first), count, length))
    grid = store.batch(torch.from_numpy(index[order]), 32)
    with pytest.raises(ValueError, match="need atom_rows"):  # sequence pairs without their maps
        store.batch(torch.from_numpy(index[order]), 32, sequences=(torch.from_numpy(first),
                                                                   count, length))
    b, real = len(index), int(store.sizes.sum()) + len(index)
    # rows and sequence positions are inverse on real tokens; the rows are the grid's rows
    assert torch.equal(batch.sequence_row[batch.row_sequence[:real]], torch.arange(real))
    assert batch.sequence_graph.shape == (count, length)
    graph_of_row = batch.sequence_graph.flatten()[batch.row_sequence[:real]]
    assert torch.equal(graph_of_row, batch.row_position[:real] // 33)
    # each real pair has the grid's distance and hops; every other pair is distance 0
    spd = batch.pair_spd.view(count, length, length)
    hops = batch.hop_edge.view(count, length, length, -1)
    seq_of, at = batch.row_sequence[:real] // length, batch.row_sequence[:real] % length
    grid_spd, grid_hops = grid.pair_spd.view(b, 32, 32), grid.hop_edge.view(b, 32, 32, -1)
    for r in range(b, real, 3):  # atoms
        g, i = divmod(int(batch.row_position[r]), 33)
        atoms = (batch.sequence_graph[seq_of[r]] == g).nonzero().squeeze(1)[1:]  # not its token
        assert torch.equal(spd[seq_of[r], at[r], atoms], grid_spd[g, i - 1, :len(atoms)])
        assert torch.equal(hops[seq_of[r], at[r], atoms], grid_hops[g, i - 1, :len(atoms)])
        assert spd[seq_of[r], at[r], atoms[0] - 1] == 0  # the graph token's pair
    assert int((spd != 0).sum()) == int((grid_spd != 0).sum())


def test_shape_covers_random_batches() -> None:
    rng = np.random.default_rng(0)
    sizes = rng.integers(5, 60, 400)
    count, length = sequences.shape_for(sizes, 32)
    assert length % sequences.ALIGNMENT == 0 and length >= sizes.max() + 1 > length - 16
    draws = [sizes[rng.choice(400, 32, replace=False)] + 1 for _ in range(500)]
    assert all(sequences.pack(t, count, length) is not None for t in draws)
    # the fewest each draw needs, by hand: their mean plus 8 standard deviations, capped at B
    needed = np.array([next(c for c in range(1, 33) if sequences.pack(t, c, length))
                       for t in draws])
    assert needed.max() < count <= min(32, needed.mean() + 9 * needed.std())
    # a single molecule's batch gets one sequence
    assert sequences.shape_for(np.array([3, 4]), 1) == (1, 16)


def test_device_batches_place_each_step_or_leave_it_in_rows() -> None:
    from graphormer_sepnorm.data.device_batches import DeviceBatches

    graphs = mixed_graphs()  # 3, 30, 5, 22, 8, 4, 12, 9, 14 and 1 atoms
    store = GridGraphs(graphs, multi_hop_max_dist=5)
    replicas = [[[9, 0, 5], [1, 3, 8]], [[2, 4, 6], [7, 6, 2]]]  # each replica's two batches
    # 2 sequences of 32 a replica: step 1's first batch (31, 23 and 15 tokens) does not fit
    batches = list(DeviceBatches(store, replicas, stack=True, length=32, atom_rows=70,
                                 sequences=(2, 32)))
    assert batches[0].sequence_graph.shape == (2, 2, 32) and batches[1].sequence_graph is None
    assert batches[1].row_position.shape == (2, 3 + 70)  # plain rows: one shape less
    step = np.array([replicas[0][0], replicas[1][0]])
    order, first = sequences.place(store.sizes, step, 2, 32)
    assert [sorted(o) for o in order.tolist()] == [sorted(s) for s in step.tolist()]
    # the graphs in the order of their places, their targets with them
    assert torch.equal(batches[0].y, store.y[torch.from_numpy(order)])
    assert torch.equal(batches[0].row_sequence[:, :3], torch.from_numpy(first))
    assert torch.equal(batches[1].y, store.y[torch.tensor([replicas[0][1], replicas[1][1]])])
