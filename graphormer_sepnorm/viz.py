"""Pictures of molecules, of what the graph token attends to, and of embedding geometry.

RDKit draws the molecules; matplotlib (installed with the ``dev`` or ``viz`` extra) the plots.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from rdkit import Chem, rdBase
from rdkit.Chem import Draw
from rdkit.Chem.Draw import rdMolDraw2D
from torch import Tensor
from torch_geometric.data import Data

from graphormer_sepnorm.chem.featurizers import ZINC_ATOM_VOCAB
from graphormer_sepnorm.data.batch import GraphormerBatch
from graphormer_sepnorm.nn.model import Graphormer

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from PIL.Image import Image

_ZINC_BOND_TYPES = {1: Chem.BondType.SINGLE, 2: Chem.BondType.DOUBLE, 3: Chem.BondType.TRIPLE}


def graph_token_attention(model: Graphormer, batch: GraphormerBatch,
                          layers: Sequence[int] | None = None,
                          per_layer: bool = False) -> list[np.ndarray]:
    """How much the graph token attends to each atom, averaged over heads (and ``layers``).

    Args:
        model: the model; it is run in eval mode without gradients.
        batch: graphs whose node order is the RDKit atom order (as the featurizers produce).
        layers: which layers to use (e.g. ``[-1]`` for the last); default all.
        per_layer: keep one row per chosen layer instead of averaging over them.

    Returns:
        One array per graph: ``[N_g]`` (``[len(layers), N_g]`` with ``per_layer``). The remainder
        of each row (to 1) is the graph token's attention to itself.
    """
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            _, weights = model.encode(batch, need_weights=True)
    finally:
        model.train(was_training)
    chosen = [weights[i] for i in (layers if layers is not None else range(len(weights)))]
    rows = torch.stack(chosen).float().mean(dim=2)[:, :, 0, 1:].cpu()  # [L, B, N]
    if not per_layer:
        rows = rows.mean(0, keepdim=True)
    mask = batch.node_mask.cpu()
    out = [rows[:, g, mask[g]].numpy() for g in range(batch.num_graphs)]
    return out if per_layer else [o[0] for o in out]


def mol_from_zinc_graph(data: Data, vocab: Sequence[str] = ZINC_ATOM_VOCAB) -> Chem.Mol:
    """The RDKit molecule of a ZINC benchmark graph (PyG ``ZINC``), atoms in node order.

    Args:
        data: a graph with ``x`` ``[N, 1]`` atom-token indices and ``edge_attr`` bond types
            (1 single, 2 double, 3 triple, kekulized).
        vocab: the atom tokens, e.g. ``'N H1 +'``. Default: the ZINC benchmark's 28.

    Returns:
        The sanitized molecule.

    Raises:
        ValueError: a token or bond type outside the vocabulary, or a molecule RDKit rejects.
    """
    mol = Chem.RWMol()
    for index in data.x.view(data.num_nodes, -1)[:, 0].tolist():
        if not 0 <= index < len(vocab):
            raise ValueError(f"atom token index {index} outside the vocabulary ({len(vocab)})")
        symbol, *rest = vocab[index].split()
        atom = Chem.Atom(symbol)
        for part in rest:
            if part.startswith("H"):
                atom.SetNumExplicitHs(int(part[1:]))
            else:
                atom.SetFormalCharge(1 if part == "+" else -1)
        mol.AddAtom(atom)
    for (i, j), bond in zip(data.edge_index.t().tolist(),
                            data.edge_attr.view(len(data.edge_attr), -1)[:, 0].tolist(),
                            strict=True):
        if i < j:
            if bond not in _ZINC_BOND_TYPES:
                raise ValueError(f"bond type {bond} between atoms {i} and {j} is not 1, 2 or 3")
            mol.AddBond(i, j, _ZINC_BOND_TYPES[bond])
    try:
        with rdBase.BlockLogs():
            Chem.SanitizeMol(mol)
    except Exception as exc:  # RDKit raises several unrelated exception types
        raise ValueError(f"RDKit rejects the molecule: {exc}") from exc
    return mol.GetMol()


def _mol(smiles_or_mol: str | Chem.Mol) -> Chem.Mol:
    mol = Chem.MolFromSmiles(smiles_or_mol) if isinstance(smiles_or_mol, str) else smiles_or_mol
    if mol is None:
        raise ValueError(f"RDKit cannot parse {smiles_or_mol!r}")
    return mol


def _atom_colours(mol: Chem.Mol, scores: Sequence[float], cmap: str,
                  vmax: float | None) -> dict[int, tuple[float, float, float]]:
    from matplotlib import colormaps

    values = np.clip(np.asarray(scores, dtype=float), 0.0, None)
    if len(values) != mol.GetNumAtoms():
        raise ValueError(f"{len(values)} scores for {mol.GetNumAtoms()} atoms")
    top = vmax if vmax is not None else (values.max() if len(values) else 0.0)
    top = top if top > 0 else 1.0
    colour = colormaps[cmap]
    # the colormap's darkest fifth is left out so that atom labels stay legible
    return {i: tuple(float(c) for c in colour(0.8 * min(v / top, 1.0))[:3])
            for i, v in enumerate(values)}


def draw_atom_scores(smiles_or_mol: str | Chem.Mol, scores: Sequence[float],
                     size: tuple[int, int] = (420, 300), cmap: str = "Reds",
                     legend: str = "", vmax: float | None = None) -> bytes:
    """A PNG of the molecule with each atom highlighted by its score (0 white, ``vmax`` dark).

    Args:
        smiles_or_mol: the molecule, atoms in the order of ``scores``.
        scores: one value per atom, e.g. from :func:`graph_token_attention`; negatives count as 0.
        size: width and height in pixels. Default: ``(420, 300)``.
        cmap: matplotlib colormap name. Default: ``'Reds'``.
        legend: text under the drawing.
        vmax: the score drawn darkest (larger ones too); default the largest score.

    Returns:
        PNG bytes (``IPython.display.Image(data=...)`` shows them in a notebook).
    """
    return atom_scores_grid([smiles_or_mol], [scores], [legend], mols_per_row=1,
                            sub_img_size=size, cmap=cmap, vmax=vmax)


def atom_scores_grid(mols: Sequence[str | Chem.Mol], scores: Sequence[Sequence[float]],
                     legends: Sequence[str] | None = None, mols_per_row: int = 4,
                     sub_img_size: tuple[int, int] = (240, 190), cmap: str = "Reds",
                     vmax: float | None = None) -> bytes:
    """A PNG grid of molecules, each with its atoms highlighted by its own scores.

    Args:
        mols: SMILES or molecules (the same one repeated shows, e.g., one panel per layer).
        scores: one sequence of per-atom scores per molecule.
        legends: text under each panel.
        mols_per_row: panels per row. Default: 4.
        sub_img_size: width and height of a panel in pixels. Default: ``(240, 190)``.
        cmap: as :func:`draw_atom_scores`.
        vmax: the score drawn darkest in every panel; default each panel's largest score.

    Returns:
        PNG bytes.
    """
    parsed = [_mol(m) for m in mols]
    if len(scores) != len(parsed) or (legends is not None and len(legends) != len(parsed)):
        raise ValueError(f"{len(parsed)} molecules, {len(scores)} score lists and "
                         f"{len(legends) if legends is not None else 'no'} legends")
    colours = [_atom_colours(m, s, cmap, vmax) for m, s in zip(parsed, scores, strict=True)]
    rows = max(1, -(-len(parsed) // mols_per_row))
    cols = min(mols_per_row, max(1, len(parsed)))
    drawer = rdMolDraw2D.MolDraw2DCairo(cols * sub_img_size[0], rows * sub_img_size[1],
                                        *sub_img_size)
    prepared = [rdMolDraw2D.PrepareMolForDrawing(m) for m in parsed]
    drawer.DrawMolecules(prepared, highlightAtoms=[list(c) for c in colours],
                         highlightBonds=[[] for _ in prepared], highlightAtomColors=colours,
                         legends=list(legends) if legends is not None else None)
    drawer.FinishDrawing()
    return drawer.GetDrawingText()


def molecule_grid(smiles: Sequence[str | Chem.Mol], legends: Sequence[str] | None = None,
                  mols_per_row: int = 4, sub_img_size: tuple[int, int] = (220, 170)) -> Image:
    """A grid image of molecules with optional legends (e.g. their predictions).

    Args:
        smiles: SMILES or molecules.
        legends: text under each molecule.
        mols_per_row: Default: 4.
        sub_img_size: a panel's pixels. Default: ``(220, 170)``.

    Returns:
        A PIL image (shown inline by Jupyter).
    """
    mols = [_mol(s) for s in smiles]
    return Draw.MolsToGridImage(mols, molsPerRow=mols_per_row, subImgSize=sub_img_size,
                                legends=list(legends) if legends is not None else None,
                                returnPNG=False)


def plot_spectra(spectra: Mapping[str, Tensor], ax: Axes | None = None,
                 normalize: bool = True) -> Axes:
    """Singular value spectra on a log scale, one line per named embedding set.

    Args:
        spectra: name to singular values in decreasing order (e.g. from
            :func:`~graphormer_sepnorm.diagnostics.singular_values`).
        ax: where to draw; default a new figure.
        normalize: divide each spectrum by its largest value. Default: true.

    Returns:
        The axes.
    """
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
                       ax: Axes | None = None, title: str = "", cmap: str = "viridis",
                       size: float = 6.0) -> Axes:
    """The embeddings projected on their two principal components, coloured by ``values``.

    Drawn in increasing order of ``values``, so rare high values stay visible on top.

    Args:
        embeddings: ``[n, d]``.
        values: ``n`` numbers, e.g. the targets.
        ax: where to draw; default a new figure.
        title: the axes' title.
        cmap: matplotlib colormap name. Default: ``'viridis'``.
        size: marker size. Default: 6.

    Returns:
        The axes.
    """
    import matplotlib.pyplot as plt

    z = embeddings.detach().double().cpu()
    z = z - z.mean(0, keepdim=True)
    _, _, v = torch.linalg.svd(z, full_matrices=False)
    xy = (z @ v[:2].T).numpy()
    c = np.asarray(torch.as_tensor(values).detach().cpu(), dtype=float).reshape(-1)
    if len(c) != len(xy):
        raise ValueError(f"{len(c)} values for {len(xy)} embeddings")
    order = np.argsort(c, kind="stable")
    ax = ax or plt.subplots(figsize=(4.5, 4))[1]
    points = ax.scatter(xy[order, 0], xy[order, 1], c=c[order], s=size, cmap=cmap)
    ax.figure.colorbar(points, ax=ax)
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    ax.set_title(title)
    return ax
