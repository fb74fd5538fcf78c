"""The grid engine as a datamodule's plug-in: one store per split, its padding, its config."""

import pytest
import torch
from grid.test_store import mixed_graphs

from graphormer_sepnorm.data import SizeGroupedBatchSampler
from graphormer_sepnorm.grid import GridBatch, GridEngine


def samplers(graphs, seeds, batch_size=3):
    sizes = [g.num_nodes for g in graphs]
    return [SizeGroupedBatchSampler(sizes, batch_size, seed=s, drop_last=True) for s in seeds]


def test_engine_stores_each_split_once_and_pads_training_batches_as_asked() -> None:
    graphs = mixed_graphs()
    engine = GridEngine(train_length="longest")
    train = engine.batches("train", graphs, samplers(graphs, [0]), 5, pad=True)
    evaluation = engine.batches("train", graphs, samplers(graphs, [0]), 5)
    assert train.store is evaluation.store and list(engine._stores) == ["train"]
    longest = int(train.store.lengths()[-1])  # 30 atoms, rounded up to 32
    assert train.length == longest == 32 and evaluation.length is None
    assert {b.node_mask.shape[-1] for b in train} == {32}
    assert all(isinstance(b, GridBatch) and not b.stacked for b in evaluation)
    bucketed = GridEngine().batches("train", graphs, samplers(graphs, [0]), 5, pad=True)
    assert bucketed.length is None


def test_engine_stacks_one_batch_per_replica() -> None:
    graphs = mixed_graphs()
    batches = GridEngine().batches("train", graphs, samplers(graphs, [0, 1]), 5, stack=True)
    assert all(b.stacked and b.node_mask.shape[0] == 2 for b in batches)
    assert batches.store.device == torch.device("cpu")


def test_engine_config_is_what_the_cli_takes_back() -> None:
    engine = GridEngine("longest", length_multiple=16)
    config = engine.config()
    assert config == {"class_path": "graphormer_sepnorm.grid.engine.GridEngine",
                      "init_args": {"train_length": "longest", "length_multiple": 16}}
    again = GridEngine(**config["init_args"])
    assert again.config() == config
    with pytest.raises(ValueError, match="'bucketed' or 'longest'"):
        GridEngine("sequences")
