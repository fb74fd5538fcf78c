"""Pictures of molecules, of what the graph token attends to, and of embedding geometry.

RDKit draws the molecules; matplotlib (installed with the ``dev`` or ``viz`` extra) the plots.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from rdkit import Chem
from rdkit.Chem import Draw
from rdkit.Chem.Draw import rdMolDraw2D
from torch import Tensor

from graphormer_sepnorm.data.collate import GraphormerBatch
from graphormer_sepnorm.nn.model import Graphormer

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from PIL.Image import Image


def graph_token_attention(model: Graphormer, batch: GraphormerBatch,
                          layers: Sequence[int] | None = None) -> list[np.ndarray]:
    """How much the graph token attends to each atom, averaged over heads and ``layers``.

    Args:
        model: the model; it is run in eval mode without gradients.
        batch: graphs whose node order is the RDKit atom order (as the featurizers produce).
        layers: which layers to average (e.g. ``[-1]`` for the last); default all.

    Returns:
        One ``[N_g]`` array per graph; the remainder of each row (to 1) is the graph token's
        attention to itself.
    """
    was_training = model.training
    model.eval()
    with torch.no_grad():
        _, weights = model.encode(batch, need_weights=True)
    model.train(was_training)
    chosen = [weights[i] for i in (layers if layers is not None else range(len(weights)))]
    to_atoms = torch.stack(chosen).mean(dim=(0, 2))[:, 0, 1:]  # [B, N]
    return [row[mask].numpy() for row, mask in zip(to_atoms, batch.node_mask, strict=True)]


def _mol(smiles_or_mol: str | Chem.Mol) -> Chem.Mol:
    mol = Chem.MolFromSmiles(smiles_or_mol) if isinstance(smiles_or_mol, str) else smiles_or_mol
    if mol is None:
        raise ValueError(f"RDKit cannot parse {smiles_or_mol!r}")
    return mol


def draw_atom_scores(smiles_or_mol: str | Chem.Mol, scores: Sequence[float],
                     size: tuple[int, int] = (420, 300), cmap: str = "Reds",
                     legend: str = "") -> bytes:
    """A PNG of the molecule with each atom highlighted by its score (0 white, max darkest).

    Args:
        smiles_or_mol: the molecule, atoms in the order of ``scores``.
        scores: one value per atom, e.g. from :func:`graph_token_attention`.
        size: width and height in pixels. Default: ``(420, 300)``.
        cmap: matplotlib colormap name. Default: ``'Reds'``.
        legend: text under the drawing.

    Returns:
        PNG bytes (``IPython.display.Image(data=...)`` shows them in a notebook).
    """
    from matplotlib import colormaps

    mol = _mol(smiles_or_mol)
    values = np.asarray(scores, dtype=float)
    if len(values) != mol.GetNumAtoms():
        raise ValueError(f"{len(values)} scores for {mol.GetNumAtoms()} atoms")
    top = values.max() if len(values) and values.max() > 0 else 1.0
    colour = colormaps[cmap]
    colours = {i: tuple(float(c) for c in colour(v / top)[:3]) for i, v in enumerate(values)}
    drawer = rdMolDraw2D.MolDraw2DCairo(*size)
    rdMolDraw2D.PrepareAndDrawMolecule(drawer, mol, legend=legend,
                                       highlightAtoms=list(colours),
                                       highlightAtomColors=colours)
    drawer.FinishDrawing()
    return drawer.GetDrawingText()


def molecule_grid(smiles: Sequence[str], legends: Sequence[str] | None = None,
                  mols_per_row: int = 4, sub_img_size: tuple[int, int] = (220, 170)) -> Image:
    """A grid image of molecules with optional legends (e.g. their predictions)."""
    mols = [_mol(s) for s in smiles]
    return Draw.MolsToGridImage(mols, molsPerRow=mols_per_row, subImgSize=sub_img_size,
                                legends=list(legends) if legends is not None else None)


def plot_spectra(spectra: Mapping[str, Tensor], ax: Axes | None = None,
                 normalize: bool = True) -> Axes:
    """Singular value spectra on a log scale, one line per named embedding set."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(5, 3.5))[1]
    for name, values in spectra.items():
        s = values.detach().double().cpu()
        ax.plot(np.arange(1, len(s) + 1), (s / s[0] if normalize else s).numpy(), label=name)
    ax.set_yscale("log")
    ax.set_xlabel("index")
    ax.set_ylabel("singular value" + (" / largest" if normalize else ""))
    ax.legend()
    return ax


def plot_embeddings_2d(embeddings: Tensor, values: Sequence[float] | Tensor,
                       ax: Axes | None = None, title: str = "") -> Axes:
    """The embeddings projected on their two principal components, coloured by ``values``."""
    import matplotlib.pyplot as plt

    z = embeddings.detach().double().cpu()
    z = z - z.mean(0, keepdim=True)
    _, _, v = torch.linalg.svd(z, full_matrices=False)
    xy = (z @ v[:2].T).numpy()
    ax = ax or plt.subplots(figsize=(4.5, 4))[1]
    points = ax.scatter(xy[:, 0], xy[:, 1], c=np.asarray(values, dtype=float), s=6,
                        cmap="viridis")
    ax.figure.colorbar(points, ax=ax)
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    ax.set_title(title)
    return ax
