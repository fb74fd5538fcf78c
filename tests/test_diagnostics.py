import math

import lightning.pytorch as pl
import pytest
import torch
from graphs import ATOM_DIMS, BOND_DIMS, random_graph
from torch.utils.data import DataLoader

from graphormer_sepnorm.data import GraphormerCollator
from graphormer_sepnorm.diagnostics import (
    GraphTokenDiagnostics,
    effective_rank,
    singular_values,
    uniformity,
)
from graphormer_sepnorm.nn import Graphormer, GraphormerConfig


def test_effective_rank_of_orthonormal_and_identical_embeddings():
    assert effective_rank(torch.eye(6)) == pytest.approx(6.0)
    assert effective_rank(torch.ones(10, 4) * 3) == pytest.approx(1.0)
    # two directions of equal strength, whatever the basis
    q, _ = torch.linalg.qr(torch.randn(8, 8))
    z = torch.cat([q[:, :1].T.repeat(3, 1), q[:, 1:2].T.repeat(3, 1)])
    assert effective_rank(z) == pytest.approx(2.0)
    assert effective_rank(torch.zeros(3, 3)) == 0.0


def test_singular_values_sorted_and_centering():
    z = torch.tensor([[3.0, 0.0], [0.0, 1.0]])
    assert singular_values(z).tolist() == [3.0, 1.0]
    same = torch.ones(5, 3)
    assert singular_values(same, center=True).abs().max() < 1e-12
    assert effective_rank(torch.eye(4) + 5, center=True) == pytest.approx(3.0)


def test_uniformity_of_antipodal_identical_and_orthogonal_points():
    assert uniformity(torch.tensor([[1.0, 0.0], [-2.0, 0.0]])) == pytest.approx(-8.0)
    assert uniformity(torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])) == pytest.approx(0.0)
    # orthonormal: every squared distance is 2
    assert uniformity(torch.eye(5)) == pytest.approx(-4.0)
    assert uniformity(torch.eye(5), t=1.0) == pytest.approx(-2.0)
    with pytest.raises(ValueError):
        uniformity(torch.ones(1, 3))


def test_spread_embeddings_are_more_uniform_than_collapsed_ones():
    gen = torch.Generator().manual_seed(0)
    spread = torch.randn(200, 16, generator=gen)
    collapsed = spread[:, :1] * torch.ones(1, 16) + 0.01 * spread
    assert uniformity(spread) < uniformity(collapsed)
    assert effective_rank(spread) > 10 > 2 > effective_rank(collapsed)
    assert math.isfinite(uniformity(spread))


class _Module(pl.LightningModule):
    """A tiny Graphormer regressor; ``through_head=False`` validates without the head."""

    def __init__(self, through_head: bool = True):
        super().__init__()
        self.through_head = through_head
        self.model = Graphormer(GraphormerConfig(ATOM_DIMS, BOND_DIMS, num_layers=1,
                                                 hidden_dim=8, ffn_dim=8, num_heads=2))
        self.embed_calls = 0
        embed = self.model.embed

        def counting_embed(batch):
            self.embed_calls += 1
            return embed(batch)

        self.model.embed = counting_embed

    def training_step(self, batch, batch_idx):
        return (self.model(batch) - batch.y).abs().mean()

    def validation_step(self, batch, batch_idx):
        if self.through_head:
            self.model(batch)
        else:
            self.model.encode(batch)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), 1e-3)


def _fit(tmp_path, module, callback, sanity_steps=0):
    graphs = [random_graph(4 + i % 5, seed=i, p=0.4, y=float(i)) for i in range(12)]
    loader = DataLoader(graphs, batch_size=4, collate_fn=GraphormerCollator())
    trainer = pl.Trainer(max_epochs=1, callbacks=[callback], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         default_root_dir=tmp_path, num_sanity_val_steps=sanity_steps)
    trainer.fit(module, loader, loader)
    return trainer, loader


@pytest.mark.parametrize("through_head", [True, False])
def test_callback_logs_rank_and_uniformity_of_validation_embeddings(tmp_path, through_head):
    module = _Module(through_head)
    callback = GraphTokenDiagnostics(max_graphs=10)
    trainer, loader = _fit(tmp_path, module, callback, sanity_steps=1)
    # the sanity check logs nothing; three validation batches, 10 of 12 graphs measured
    assert sum(len(e) for e in callback._embeddings) == 12
    module.eval()
    with torch.no_grad():
        z = torch.cat([module.model.embed(b) for b in loader])[:10]
    metrics = trainer.callback_metrics
    assert float(metrics["val/cls_effective_rank"]) == pytest.approx(effective_rank(z), rel=1e-5)
    assert float(metrics["val/cls_uniformity"]) == pytest.approx(uniformity(z), rel=1e-5)
    assert 1.0 <= float(metrics["val/cls_effective_rank"]) <= 8.0
    assert callback._hook is None  # removed after validation
    module.model.head(torch.zeros(1, 8))
    assert callback._pending is None  # training-time forwards are not collected


def test_callback_reuses_the_validation_forward(tmp_path):
    # 12 graphs in batches of 4: the callback adds no embed call when the validation step runs
    # the head, and one per validation batch (3) when it does not
    for through_head, extra in ((True, 0), (False, 3)):
        calls = []
        for callbacks in ([], [GraphTokenDiagnostics()]):
            module = _Module(through_head)
            trainer = pl.Trainer(max_epochs=1, callbacks=callbacks, logger=False,
                                 enable_checkpointing=False, enable_progress_bar=False,
                                 default_root_dir=tmp_path, num_sanity_val_steps=0)
            loader = DataLoader([random_graph(5, seed=i, y=1.0) for i in range(12)],
                                batch_size=4, collate_fn=GraphormerCollator())
            trainer.fit(module, loader, loader)
            calls.append(module.embed_calls)
        assert calls[1] - calls[0] == extra
