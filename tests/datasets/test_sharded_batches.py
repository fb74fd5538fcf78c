import pytest

from graphormer_sepnorm.data import SizeGroupedBatchSampler
from graphormer_sepnorm.datasets.base import ShardedBatches, split_to_count


def shards(sizes, batch_size, world, even):
    sampler = SizeGroupedBatchSampler(sizes, batch_size, shuffle=False)
    out = [ShardedBatches(sampler, rank, world, even) for rank in range(world)]
    for shard in out:
        assert len(shard) == len(list(shard))
    return [list(shard) for shard in out]


def test_evaluation_shards_cover_every_graph_once():
    for n, batch_size, world in [(10, 3, 2), (5, 8, 2), (7, 8, 3), (3, 8, 3), (9, 2, 4)]:
        parts = shards([4] * n, batch_size, world, even=False)
        seen = sorted(i for part in parts for batch in part for i in batch)
        assert seen == list(range(n)), (n, batch_size, world)
        assert all(part for part in parts), "a process without evaluation batches"


def test_one_small_batch_is_split_between_processes():
    assert shards([4] * 5, 8, 2, even=False) == [[[0, 1]], [[2, 3, 4]]]


def test_fewer_graphs_than_processes_is_an_error():
    with pytest.raises(ValueError, match="2 graphs cannot give each of 3 processes"):
        shards([4, 4], 8, 3, even=False)


def test_training_shards_are_even_and_never_split():
    parts = shards([4] * 10, 3, 2, even=True)  # 4 batches: 2 each; the 1-graph batch too
    assert [len(p) for p in parts] == [2, 2]
    assert shards([4] * 5, 8, 2, even=True) == [[], []]  # too few to train: nothing, as before


def test_split_to_count_keeps_order():
    assert split_to_count([[0, 1, 2, 3], [4]], 3) == [[0, 1], [2, 3], [4]]
    assert split_to_count([], 2) == []
