import matplotlib
import numpy as np
import pytest
import torch
from graphs import ATOM_DIMS, BOND_DIMS, random_graph

from graphormer_sepnorm.data import GraphormerCollator
from graphormer_sepnorm.nn import Graphormer
from graphormer_sepnorm.viz import (
    draw_atom_scores,
    graph_token_attention,
    molecule_grid,
    plot_embeddings_2d,
    plot_spectra,
)

matplotlib.use("Agg")
PNG = b"\x89PNG\r\n\x1a\n"


def test_graph_token_attention_per_atom():
    model = Graphormer(ATOM_DIMS, BOND_DIMS, num_layers=2, hidden_dim=16, ffn_dim=16,
                       num_heads=4).train()
    batch = GraphormerCollator()([random_graph(5, 0, p=0.5), random_graph(8, 1, p=0.3)])
    scores = graph_token_attention(model, batch)
    assert [len(s) for s in scores] == [5, 8]
    assert all((s > 0).all() and s.sum() < 1 for s in scores)  # the rest is on itself
    last = graph_token_attention(model, batch, layers=[-1])
    assert not np.allclose(last[1], scores[1])
    assert model.training  # the mode is restored


def test_draw_atom_scores_writes_a_png(tmp_path):
    png = draw_atom_scores("c1ccccc1O", [0.1, 0.2, 0.0, 0.4, 0.3, 0.2, 0.9], legend="phenol")
    assert png.startswith(PNG) and len(png) > 2000
    (tmp_path / "phenol.png").write_bytes(png)
    with pytest.raises(ValueError, match="scores for 7 atoms"):
        draw_atom_scores("c1ccccc1O", [0.1])
    with pytest.raises(ValueError, match="cannot parse"):
        draw_atom_scores("C1CC", [0.1])


def test_grid_and_plots():
    image = molecule_grid(["CCO", "c1ccccc1"], legends=["0.12", "0.98"], mols_per_row=2)
    assert image.size == (440, 170)
    ax = plot_spectra({"SepNorm": torch.tensor([4.0, 2.0, 1.0]),
                       "ShareNorm": torch.tensor([4.0, 0.1, 0.01])})
    assert len(ax.lines) == 2 and ax.lines[0].get_ydata()[0] == 1.0
    ax = plot_embeddings_2d(torch.randn(30, 8), torch.arange(30.0), title="tokens")
    assert ax.get_title() == "tokens" and len(ax.collections[0].get_offsets()) == 30
