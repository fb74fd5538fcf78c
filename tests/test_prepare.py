from dataclasses import fields, replace

import numpy as np
import torch
from tiny_data import SMILES, featurize_with_paths

from graphormer_sepnorm.chem.featurizers import OgbFeaturizer, ZincFeaturizer
from graphormer_sepnorm.data import GraphormerCollator
from graphormer_sepnorm.prediction.prepare import (
    pack,
    pack_batch,
    prepare_chunk,
    unpack,
    unpack_batch,
)

ROWS = ["bad(", *SMILES[:9], "", "C[Si](C)(C)C", *SMILES[9:]]


def assert_batches_equal(a, b):
    for f in fields(a):
        left, right = getattr(a, f.name), getattr(b, f.name)
        assert (left is None) == (right is None), f.name
        if isinstance(left, torch.Tensor):
            assert left.dtype == right.dtype and torch.equal(left, right), f.name
        else:  # plain values the collator states (the hop-block layout)
            assert left == right, f.name


def test_prepared_batches_equal_collating_the_pyg_graphs():
    for featurizer in (ZincFeaturizer(), OgbFeaturizer()):
        collator = GraphormerCollator(5)
        chunk = prepare_chunk(ROWS, featurizer, collator, batch_size=4)
        graphs, errors = featurize_with_paths(ROWS, featurizer)
        assert chunk.errors == errors
        rows = [r for members, _ in chunk.batches for r in members]
        assert sorted(rows) == [i for i, g in enumerate(graphs) if g is not None]
        assert all(len(members) <= 4 for members, _ in chunk.batches)
        sizes = [graphs[r].num_nodes for r in rows]
        assert sizes == sorted(sizes)  # size-sorted: little padding
        for members, batch in chunk:
            assert_batches_equal(batch, collator([graphs[r] for r in members]))


def test_pack_round_trip_shifts_rows():
    chunk = prepare_chunk(ROWS, ZincFeaturizer(), GraphormerCollator(5), batch_size=8)
    back = unpack(pack(chunk), offset=100)
    assert back.errors == chunk.errors
    assert all(isinstance(batch, dict) for _, batch in back.batches)  # unpacked when used
    for (rows, batch), (rows_back, batch_back) in zip(chunk, back, strict=True):
        assert rows_back == [r + 100 for r in rows]
        assert_batches_equal(batch, batch_back)


def test_all_rows_flagged_gives_no_batches():
    chunk = prepare_chunk(["", "xx("], ZincFeaturizer(), GraphormerCollator(5), batch_size=8)
    assert chunk.batches == [] and all(chunk.errors)


def test_packed_hop_lists_are_compact_and_other_layouts_survive():
    chunk = prepare_chunk(SMILES, ZincFeaturizer(), GraphormerCollator(5), batch_size=64)
    (rows, batch), = list(chunk)
    packed = pack_batch(batch)
    assert packed["hop_index"] is None and packed["hop_edge"].dtype == np.int32
    assert len(packed["hop_pair"]) < len(batch.hop_pair)
    assert_batches_equal(unpack_batch(packed), batch)
    # a layout that is not hop-major (the batch states no hop counts) is sent as it is
    order = torch.randperm(len(batch.hop_pair), generator=torch.Generator().manual_seed(0))
    shuffled = replace(batch, hop_pair=batch.hop_pair[order], hop_index=batch.hop_index[order],
                       hop_edge=batch.hop_edge[order], hop_counts=None)
    packed = pack_batch(shuffled)
    assert "hop_blocks" not in packed
    assert_batches_equal(unpack_batch(packed), shuffled)
