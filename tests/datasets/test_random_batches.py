"""Training batches are uniform random samples, so SepNorm's graph-token BatchNorm sees the data.

Size-grouped batches (the earlier default: pools of 50 batches sorted by molecule size) gave every
batch molecules of nearly one size; the BatchNorm then subtracted, batch by batch, what size
explains, and a SepNorm model could not learn a size-dependent target. Both tests below fail with
``train_batches='size_grouped'``, as the contrasts in them show.
"""

from __future__ import annotations

import contextlib
import random
import statistics
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from graphormer_sepnorm.datasets import SmilesCSVDataModule
from graphormer_sepnorm.nn import Graphormer, GraphormerConfig


def size_csv(path: Path, count: int = 320, seed: int = 0) -> Path:
    """``count`` acyclic molecules of 3-30 heavy atoms (C, N, O chains with methyl branches);
    target ``y`` is the heavy-atom count."""
    rng = random.Random(seed)
    lines = ["smiles,y"]
    for _ in range(count):
        atoms, smiles = rng.randint(3, 30), ""
        placed = 0
        while placed < atoms:
            smiles += rng.choice("CCCNO")
            placed += 1
            if smiles[-1] != "O" and 1 < placed < atoms - 1 and rng.random() < 0.2:
                smiles += "(C)"
                placed += 1
        lines.append(f"{smiles},{placed}")
    path.write_text("\n".join(lines) + "\n")
    return path


def datamodule(path: Path, train_batches: str) -> SmilesCSVDataModule:
    module = SmilesCSVDataModule(str(path), target_columns=["y"], split="random",
                                 batch_size=32, eval_batch_size=64, train_batches=train_batches)
    module.setup("fit")
    return module


def batch_sizes(module: SmilesCSVDataModule, epochs: int = 4) -> list[list[int]]:
    """Atom counts of the molecules of each training batch over ``epochs`` epochs."""
    loader = module.train_dataloader()
    graphs = module.splits["train"]
    out = []
    for epoch in range(epochs):
        loader.batch_sampler.set_epoch(epoch)
        out += [[graphs[i].num_nodes for i in b] for b in loader.batch_sampler]
    return out


@pytest.mark.parametrize("train_batches", ["random", "size_grouped"])
def test_training_batches_spread_like_random_samples(tmp_path, train_batches):
    with pytest.warns(UserWarning) if train_batches == "size_grouped" else _no_warning():
        module = datamodule(size_csv(tmp_path / "sizes.csv"), train_batches)
        batches = batch_sizes(module)
    sizes = [g.num_nodes for g in module.splits["train"]]
    spread = statistics.pstdev(sizes)
    within = statistics.mean(statistics.pstdev(b) for b in batches if len(b) == 32)
    # mean size of a batch of 32 drawn without replacement from n graphs: std spread/sqrt(32)
    # times the finite-population factor; allow 1.6x for the sampling noise of 32 batches
    n = len(sizes)
    expected = spread / 32**0.5 * ((n - 32) / (n - 1)) ** 0.5
    between = statistics.pstdev(statistics.mean(b) for b in batches if len(b) == 32)
    random_like = within > 0.85 * spread and between < 1.6 * expected
    assert random_like == (train_batches == "random"), (within, spread, between, expected)


@contextlib.contextmanager
def _no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        yield


def fit_size(module: SmilesCSVDataModule, epochs: int = 30) -> float:
    """Trains a small SepNorm model on the standardized size target; validation MAE in atoms."""
    torch.manual_seed(0)
    info = module.dataset_info
    model = Graphormer(GraphormerConfig(
        info["atom_feature_dims"], info["edge_feature_dims"], num_layers=2, hidden_dim=32,
        ffn_dim=32, num_heads=4, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
        multi_hop_max_dist=5))
    mean, std = (torch.tensor(v) for v in module.target_statistics())
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loader = module.train_dataloader()
    total = epochs * len(loader)  # linear decay to 0, so the running statistics catch up
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / total)
    for epoch in range(epochs):
        loader.batch_sampler.set_epoch(epoch)
        model.train()
        for batch in loader:
            loss = F.l1_loss(model(batch), (batch.y - mean) / std)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    model.eval()
    errors = []
    with torch.no_grad():
        for batch in module.val_dataloader():
            errors.append((model(batch) * std + mean - batch.y).abs())
    return torch.cat(errors).mean().item()


def test_sepnorm_learns_molecule_size_only_from_random_batches(tmp_path):
    path = size_csv(tmp_path / "sizes.csv")
    random_mae = fit_size(datamodule(path, "random"))
    with pytest.warns(UserWarning, match="size_grouped"):
        grouped_mae = fit_size(datamodule(path, "size_grouped"))
    # sizes 3-30 have a std of about 8 atoms; predicting the mean gives an MAE of about 7
    assert random_mae < 1.0, random_mae
    assert grouped_mae > 3 * random_mae, (grouped_mae, random_mae)
