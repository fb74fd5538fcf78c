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


def test_shape_covers_most_random_batches() -> None:
    rng = np.random.default_rng(0)
    sizes = rng.integers(5, 60, 400)
    count, length = sequences.shape_for(sizes, 32)
    assert length % sequences.ALIGNMENT == 0 and length >= sizes.max() + 1 > length - 16
    draws = [sizes[rng.choice(400, 32, replace=False)] + 1 for _ in range(500)]
    # the fewest each draw needs, by hand: their mean plus 2 standard deviations
    needed = np.array([next(c for c in range(1, 33) if sequences.pack(t, c, length))
                       for t in draws])
    assert abs(count - (needed.mean() + 2 * needed.std())) <= 1.5
    assert 0 < sum(sequences.pack(t, count, length) is None for t in draws) < 0.1 * len(draws)
    # a single molecule's batch gets one sequence
    assert sequences.shape_for(np.array([3, 4]), 1) == (1, 16)


def test_fit_epoch_by_hand() -> None:
    # 1 + atoms tokens: 31, 23, 15 | 2, 4, 5 | 31, 13, 9 in 2 sequences of 32
    sizes = np.array([30, 22, 14, 1, 3, 4, 30, 12, 8])
    batches = [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    # the first does not fit (31 | 23, and 15 fits with neither); its 31 goes to the first
    # batch that can take it for its smallest (the next one: 2 for 31 leaves 31 | 4 + 5)
    assert sequences.fit_epoch(batches, sizes, 2, 32) == [[3, 1, 2], [0, 4, 5], [6, 7, 8]]
    assert batches == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]  # the caller's lists are left alone
    # the last batch looks back round the epoch; a batch with no taker stays as it is
    assert sequences.fit_epoch([[3, 4, 5], [0, 1, 2]], sizes, 2, 32) == [[0, 4, 5], [3, 1, 2]]
    assert sequences.fit_epoch([[0, 1, 2], [6, 7, 8]], sizes, 2, 32) == [[0, 1, 2], [6, 7, 8]]


def test_fit_epoch_keeps_each_molecule_once_and_fits_random_epochs() -> None:
    rng = np.random.default_rng(3)
    sizes = rng.integers(5, 60, 640)
    count, length = sequences.shape_for(sizes, 32, sigmas=0.5)  # tight: many need swaps
    epoch = rng.permutation(640).reshape(20, 32).tolist()
    before = sum(sequences.pack(sizes[b] + 1, count, length) is None for b in epoch)
    fitted = sequences.fit_epoch(epoch, sizes, count, length)
    assert before >= 3
    assert all(sequences.pack(sizes[b] + 1, count, length) is not None for b in fitted)
    assert sorted(sum(fitted, [])) == list(range(640)) and {len(b) for b in fitted} == {32}
    moved = sum(len(set(a) - set(b)) for a, b in zip(epoch, fitted, strict=True))
    assert 0 < moved < 3 * before * 3  # a few molecules per overflowing batch


def test_resumed_epoch_swaps_as_the_uninterrupted_one() -> None:
    from graphormer_sepnorm.data.resumable import ResumableBatchSampler

    sizes = np.array([30, 22, 14, 1, 3, 4, 30, 12, 8])
    epoch = [[0, 1, 2], [3, 4, 5], [6, 7, 8]]

    def fit(batches):
        return sequences.fit_epoch(batches, sizes, 2, 32)

    whole = list(ResumableBatchSampler(epoch, repair=fit))
    resumed = ResumableBatchSampler(epoch, repair=fit)
    resumed.resume_at(0, 1)
    assert list(resumed) == whole[1:] and whole[1] == [0, 4, 5]


def test_device_batches_place_each_step_or_leave_it_in_rows() -> None:
    from graphormer_sepnorm.data.device_batches import DeviceBatches
    from graphormer_sepnorm.data.resumable import ResumableBatchSampler

    graphs = mixed_graphs()  # 3, 30, 5, 22, 8, 4, 12, 9, 14 and 1 atoms
    store = GridGraphs(graphs, multi_hop_max_dist=5)
    replicas = [[[9, 0, 5], [1, 3, 8]], [[2, 4, 6], [7, 6, 2]]]  # each replica's two batches
    # 2 sequences of 32 a replica: step 1's first batch (31, 23 and 15 tokens) does not fit
    # until its 31 swaps with batch 0's 2 (10); alone in its epoch it stays in rows
    batches = list(DeviceBatches(store, replicas, stack=True, length=32, atom_rows=70,
                                 sequences=(2, 32)))
    assert all(b.sequence_graph.shape == (2, 2, 32) for b in batches)
    fitted = [[[1, 0, 5], [9, 3, 8]], replicas[1]]
    samplers = [ResumableBatchSampler(r) for r in replicas]
    assert list(DeviceBatches(store, samplers, stack=True, length=32, atom_rows=70,
                              sequences=(2, 32)).sampler[0]) == fitted[0]
    with pytest.warns(UserWarning, match="even after swaps"):
        alone = list(DeviceBatches(store, [r[1:] for r in replicas], stack=True, length=32,
                                   atom_rows=70, sequences=(2, 32)))
    assert alone[0].sequence_graph is None
    assert alone[0].row_position.shape == (2, 3 + 70)  # plain rows: one shape less
    step = np.array([fitted[0][0], fitted[1][0]])
    order, first = sequences.place(store.sizes, step, 2, 32)
    assert [sorted(o) for o in order.tolist()] == [sorted(s) for s in step.tolist()]
    # the graphs in the order of their places, their targets with them
    assert torch.equal(batches[0].y, store.y[torch.from_numpy(order)])
    assert torch.equal(batches[0].row_sequence[:, :3], torch.from_numpy(first))
