from graphormer_sepnorm.data import SizeGroupedBatchSampler

SIZES = [5, 40, 6, 39, 7, 38, 8, 37, 9, 36, 10, 35, 11]


def test_every_index_once_and_sizes_grouped():
    sampler = SizeGroupedBatchSampler(SIZES, batch_size=2, pool_batches=100, seed=1)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(len(SIZES)))
    assert len(batches) == len(sampler) == 7
    # one pool holds everything, so batches are consecutive pairs in size order
    assert sorted(sorted(SIZES[i] for i in b) for b in batches) == [
        [5, 6], [7, 8], [9, 10], [11, 35], [36, 37], [38, 39], [40]]


def test_epochs_differ_and_are_reproducible():
    sampler = SizeGroupedBatchSampler(SIZES, batch_size=3, pool_batches=1, seed=0)
    first = list(sampler)
    sampler.set_epoch(1)
    second = list(sampler)
    sampler.set_epoch(0)
    assert list(sampler) == first and second != first


def test_unshuffled_keeps_order_and_drop_last():
    sampler = SizeGroupedBatchSampler(SIZES, batch_size=5, shuffle=False)
    assert list(sampler) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11, 12]]
    dropping = SizeGroupedBatchSampler(SIZES, batch_size=5, drop_last=True)
    assert len(dropping) == 2 and all(len(b) == 5 for b in dropping)
