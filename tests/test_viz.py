import matplotlib
import numpy as np
import PIL.Image
import pytest
import torch
from graphs import ATOM_DIMS, BOND_DIMS, random_graph
from rdkit import Chem

from graphormer_sepnorm.chem.featurizers import ZincFeaturizer
from graphormer_sepnorm.data import GraphormerCollator
from graphormer_sepnorm.nn import Graphormer, GraphormerConfig
from graphormer_sepnorm.viz import (
    _atom_colours,
    atom_scores_grid,
    draw_atom_scores,
    graph_token_attention,
    mol_from_zinc_graph,
    molecule_grid,
    plot_embeddings_2d,
    plot_spectra,
)

matplotlib.use("Agg")
PNG = b"\x89PNG\r\n\x1a\n"


def test_graph_token_attention_per_atom():
    model = Graphormer(GraphormerConfig(ATOM_DIMS, BOND_DIMS, num_layers=2, hidden_dim=16,
                                        ffn_dim=16, num_heads=4)).train()
    batch = GraphormerCollator()([random_graph(5, 0, p=0.5), random_graph(8, 1, p=0.3)])
    scores = graph_token_attention(model, batch)
    assert [len(s) for s in scores] == [5, 8]
    assert all((s > 0).all() and s.sum() < 1 for s in scores)  # the rest is on itself
    last = graph_token_attention(model, batch, layers=[-1])
    assert not np.allclose(last[1], scores[1])
    assert model.training  # the mode is restored
    layers = graph_token_attention(model, batch, per_layer=True)
    assert [s.shape for s in layers] == [(2, 5), (2, 8)]
    for mean, rows in zip(scores, layers, strict=True):
        np.testing.assert_allclose(rows.mean(0), mean, rtol=1e-5)
    np.testing.assert_allclose(graph_token_attention(model, batch, [1], per_layer=True)[1][0],
                               layers[1][1], rtol=1e-6)
    np.testing.assert_allclose(last[1], layers[1][1], rtol=1e-6)


def test_draw_atom_scores_writes_a_png(tmp_path):
    png = draw_atom_scores("c1ccccc1O", [0.1, 0.2, 0.0, 0.4, 0.3, 0.2, 0.9], legend="phenol")
    assert png.startswith(PNG) and len(png) > 2000
    (tmp_path / "phenol.png").write_bytes(png)
    with pytest.raises(ValueError, match="scores for 7 atoms"):
        draw_atom_scores("c1ccccc1O", [0.1])
    with pytest.raises(ValueError, match="cannot parse"):
        draw_atom_scores("C1CC", [0.1])


def test_atom_colours_scale():
    from matplotlib import colormaps

    mol = Chem.MolFromSmiles("CCO")
    reds = colormaps["Reds"]
    colours = _atom_colours(mol, [0.0, -1.0, 0.5], "Reds", None)
    assert colours[0] == colours[1] == pytest.approx(reds(0.0)[:3])  # negatives count as 0
    assert colours[2] == pytest.approx(reds(0.8)[:3])  # the largest: the darkest shade used
    assert _atom_colours(mol, [0.0, 0.0, 0.5], "Reds", 1.0)[2] == pytest.approx(reds(0.4)[:3])
    assert _atom_colours(mol, [0.0, 0.0, 0.0], "Reds", None)[2] == pytest.approx(reds(0.0)[:3])


def test_atom_scores_grid_panels(tmp_path):
    png = atom_scores_grid(["CCO"] * 3 + ["c1ccccc1"], [[0.1, 0.2, 0.3]] * 3 + [[0.1] * 6],
                           legends=["layer 1", "layer 2", "layer 3", "benzene"],
                           mols_per_row=3, sub_img_size=(100, 80), vmax=0.3)
    (tmp_path / "grid.png").write_bytes(png)
    assert png.startswith(PNG)
    assert PIL.Image.open(tmp_path / "grid.png").size == (300, 160)
    with pytest.raises(ValueError, match="2 molecules, 1 score lists"):
        atom_scores_grid(["CCO", "CC"], [[0.1, 0.2, 0.3]])
    with pytest.raises(ValueError, match="2 scores for 3 atoms"):
        atom_scores_grid(["CCO"], [[0.1, 0.2]])


@pytest.mark.parametrize("smiles", ["c1ccccc1O", "C[NH3+]", "O=[N+]([O-])c1ccc(Cl)cc1",
                                    "c1cc[nH]c1", "CC(=O)[O-]", "CC#N", "Cn1cc[n+](C)c1",
                                    "CS(=O)c1ccccc1", "CP(C)(=O)O", "C[NH+]1CCCC1"])
def test_mol_from_zinc_graph_rebuilds_the_molecule(smiles):
    mol = mol_from_zinc_graph(ZincFeaturizer()(smiles))
    assert Chem.MolToSmiles(mol) == Chem.MolToSmiles(Chem.MolFromSmiles(smiles))


def test_mol_from_zinc_graph_keeps_node_order_and_rejects_unknowns():
    graph = ZincFeaturizer()("OCC(N)=O")
    mol = mol_from_zinc_graph(graph)
    assert [a.GetSymbol() for a in mol.GetAtoms()] == ["O", "C", "C", "N", "O"]
    graph.x[0, 0] = 99
    with pytest.raises(ValueError, match="outside the vocabulary"):
        mol_from_zinc_graph(graph)
    graph = ZincFeaturizer()("CC")
    graph.edge_attr[:] = 7
    with pytest.raises(ValueError, match="bond type 7"):
        mol_from_zinc_graph(graph)


def test_pca_projection_and_drawing_order():
    direction = torch.tensor([3.0, 4.0]) / 5
    t = torch.tensor([2.0, -1.0, 0.5, -1.5])
    ax = plot_embeddings_2d(t[:, None] * direction + 7.0, -t)
    drawn = ax.collections[0]
    np.testing.assert_allclose(drawn.get_array(), [-2.0, -0.5, 1.0, 1.5])  # increasing
    xy = drawn.get_offsets()
    # PC 1 is the line itself (up to sign), centred; PC 2 carries nothing
    centred = (t - t.mean()).abs().numpy()[[0, 2, 1, 3]]
    np.testing.assert_allclose(np.abs(xy[:, 0]), centred, atol=1e-6)
    np.testing.assert_allclose(xy[:, 1], 0.0, atol=1e-6)
    with pytest.raises(ValueError, match="3 values for 4 embeddings"):
        plot_embeddings_2d(torch.randn(4, 3), [1.0, 2.0, 3.0])


def test_grid_and_plots():
    image = molecule_grid(["CCO", "c1ccccc1"], legends=["0.12", "0.98"], mols_per_row=2)
    assert image.size == (440, 170)
    ax = plot_spectra({"SepNorm": torch.tensor([4.0, 2.0, 1.0]),
                       "ShareNorm": torch.tensor([4.0, 0.1, 0.01])})
    assert len(ax.lines) == 2 and ax.lines[0].get_ydata()[0] == 1.0
    ax = plot_embeddings_2d(torch.randn(30, 8), torch.arange(30.0), title="tokens")
    assert ax.get_title() == "tokens" and len(ax.collections[0].get_offsets()) == 30
