"""RDKit's path descriptors (Chi 2-4 n and v, Kappa 2-3, Phi) from one walk over the paths.

RDKit's ``Chi2n`` .. ``Chi4v``, ``Kappa2``, ``Kappa3`` and ``Phi`` each enumerate the molecule's
paths of 2, 3 or 4 bonds again (``findAllPathsOfLengthN``, in C++): nine enumerations a molecule,
about 0.3 ms for a ZINC molecule. Here the paths are walked once, as arrays, and their counts
and weight sums are cached on the molecule (about 0.11 ms).

RDKit's path of ``L`` bonds is a set of ``L`` distinct bonds walked one after the other: a
simple path (``L + 1`` distinct atoms), a ring of ``L`` bonds, or, for ``L = 4``, a triangle
with one bond before it. Its Chi term is the product of the atoms' weights along the walk: a
ring's atoms once each, the triangle's junction atom twice (RDKit's ``calcChiNv``). The walk
extends directed simple paths one bond at a time; each simple path is met twice (once each
way), each ring ``2 L`` times (from each atom, both ways) and each triangle with a bond before
it twice (around the triangle both ways).

Exactness: the path counts are RDKit's, so Kappa2, Kappa3 and Phi are RDKit's to the last bit
(its formulas, in its order, from the same counts and RDKit's Hall-Kier alpha). The Chi values
add the same terms in another order (and multiply half of them in the other direction): equal
to RDKit's within rounding, at most 3e-15 relative on 3,000 ZINC molecules and odd ones, not
bit for bit. Molecules with hydrogen atoms (which RDKit's paths leave out) take RDKit's own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from rdkit import Chem
from rdkit.Chem import rdMolDescriptors

from graphormer_sepnorm.chem.graph_shortcuts import OUTER, MolTables, mol_tables

__all__ = ["PATH_SHORTCUTS", "ROUNDED", "PathSums", "atom_weights", "kappa2", "kappa3",
           "path_sums", "phi"]


class PathSums(NamedTuple):
    """RDKit's paths of 2, 3 and 4 bonds: how many, and their Chi terms summed.

    Attributes:
        counts: Paths of 2, 3 and 4 bonds.
        chi: ``[3, 2]``: per length, the sum of the paths' products of ``nVals`` (Chi*n) and
            of Hall-Kier deltas (Chi*v).
    """

    counts: tuple[int, int, int]
    chi: np.ndarray


def atom_weights(tables: MolTables) -> np.ndarray:
    """``[N, 2]``: RDKit's ``nVals`` and ``hkDeltas`` per atom (each ``x ** -0.5``, 0 kept).

    ``nVals``: outer electrons less hydrogens. ``hkDeltas``: 0 for hydrogen and dummy atoms,
    the same as ``nVals`` up to neon, beyond it divided by ``Z - outer - 1``.
    """
    z = tables.atomic
    valence = (OUTER[z] - tables.hydrogens).astype(np.float64)
    delta = np.where(z <= 1, 0.0, np.where(z <= 10, valence, valence / (z - OUTER[z] - 1)))
    both = np.stack([valence, delta], 1)
    with np.errstate(divide="ignore", invalid="ignore"):  # negative values: NaN, as RDKit's
        return np.where(both != 0, 1.0 / np.sqrt(both), both)


def _neighbour_table(atoms: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """``[N, max degree]``: each atom's neighbours, padded with -1."""
    order = np.argsort(src, kind="stable")
    degree = np.bincount(src, minlength=atoms)
    slot = np.arange(len(src)) - np.repeat(np.cumsum(degree) - degree, degree)
    table = np.full((atoms, int(degree.max(initial=0))), -1, dtype=np.int64)
    table[src[order], slot] = dst[order]
    return table


def _walk(tables: MolTables, weights: np.ndarray) -> PathSums:
    """Counts and Chi sums of RDKit's paths of 2, 3 and 4 bonds (see the module docstring)."""
    src = np.concatenate([tables.begin, tables.end])
    dst = np.concatenate([tables.end, tables.begin])
    table = _neighbour_table(len(tables.atomic), src, dst)
    walks, products = np.stack([src, dst], 1), weights[src] * weights[dst]  # one bond each way
    counts, sums = [], []
    for bonds in (2, 3, 4):
        rows, cols = np.nonzero(table[walks[:, -1]] >= 0)
        step = table[walks[rows, -1], cols]
        # returns to an earlier atom (to the one just left: back along the same bond, no path)
        returns = walks[rows, :bonds - 1] == step[:, None]
        simple = ~returns.any(1)
        longer = products[rows[simple]] * weights[step[simple]]
        count, total = int(simple.sum()) // 2, longer.sum(0) / 2
        if bonds >= 3:  # back to the first atom: a ring of `bonds` bonds
            ring = returns[:, 0]
            count += int(ring.sum()) // (2 * bonds)
            total = total + products[rows[ring]].sum(0) / (2 * bonds)
        if bonds == 4:  # back to the second atom: a triangle after one bond, junction twice
            lasso = returns[:, 1]
            count += int(lasso.sum()) // 2
            total = total + (products[rows[lasso]] * weights[step[lasso]]).sum(0) / 2
        counts.append(count)
        sums.append(total)
        walks = np.concatenate([walks[rows[simple]], step[simple, None]], 1)
        products = longer
    return PathSums((counts[0], counts[1], counts[2]), np.array(sums).reshape(3, 2))


def path_sums(mol: Chem.Mol) -> PathSums | None:
    """The molecule's :class:`PathSums`, cached on it; ``None`` if it has hydrogen atoms."""
    cached = getattr(mol, "_graphormerPaths", None)
    if cached is None:
        tables = mol_tables(mol)
        cached = False if (tables.atomic == 1).any() else _walk(tables, atom_weights(tables))
        mol._graphormerPaths = cached
    return cached or None


def _chi(mol: Chem.Mol, order: int, kind: int, rdkit: Callable[[Chem.Mol, int], float]
         ) -> float:
    sums = path_sums(mol)
    return rdkit(mol, order) if sums is None else float(sums.chi[order - 2, kind])


def _kappa2_of(paths: float, heavy: float, alpha: float) -> float:
    """RDKit's ``kappa2Helper``, its operations in its order."""
    denom = (paths + alpha) * (paths + alpha)
    return (heavy + alpha - 1) * (heavy + alpha - 2) * (heavy + alpha - 2) / denom if denom else 0.0


def kappa2(mol: Chem.Mol) -> float:
    """``rdMolDescriptors.CalcKappa2(mol)``, its path count from :func:`path_sums`."""
    sums = path_sums(mol)
    if sums is None:
        return rdMolDescriptors.CalcKappa2(mol)
    return _kappa2_of(float(sums.counts[0]), float(mol.GetNumHeavyAtoms()),
                      rdMolDescriptors.CalcHallKierAlpha(mol))


def kappa3(mol: Chem.Mol) -> float:
    """``rdMolDescriptors.CalcKappa3(mol)`` (RDKit's ``kappa3Helper``; ``A`` an int there)."""
    sums = path_sums(mol)
    if sums is None:
        return rdMolDescriptors.CalcKappa3(mol)
    paths, heavy = float(sums.counts[1]), mol.GetNumHeavyAtoms()
    alpha = rdMolDescriptors.CalcHallKierAlpha(mol)
    denom = (paths + alpha) * (paths + alpha)
    if not denom:
        return 0.0
    first = heavy + alpha - 1 if heavy % 2 else heavy + alpha - 2
    return first * (heavy + alpha - 3) * (heavy + alpha - 3) / denom


def phi(mol: Chem.Mol) -> float:
    """``rdMolDescriptors.CalcPhi(mol)``: Kappa1 times Kappa2 over the heavy atoms."""
    sums = path_sums(mol)
    if sums is None:
        return rdMolDescriptors.CalcPhi(mol)
    heavy = mol.GetNumHeavyAtoms()
    if not heavy:
        return 0.0
    alpha = rdMolDescriptors.CalcHallKierAlpha(mol)
    bonds = float(mol.GetNumBonds())
    denom = bonds + alpha  # RDKit's kappa1Helper
    kappa1 = (heavy + alpha) * (heavy + alpha - 1) * (heavy + alpha - 1) / (denom * denom) \
        if denom else 0.0
    return kappa1 * _kappa2_of(float(sums.counts[0]), float(heavy), alpha) / heavy


#: The Chi descriptors computed here: equal to RDKit's within rounding, not bit for bit.
ROUNDED = frozenset(f"Chi{order}{kind}" for order in (2, 3, 4) for kind in "nv")
#: RDKit's descriptor names -> the functions here that give their values.
PATH_SHORTCUTS: dict[str, Callable[[Chem.Mol], float]] = {
    **{f"Chi{order}{kind}": functools.partial(
        _chi, order=order, kind=k, rdkit=getattr(rdMolDescriptors, f"CalcChiN{kind}"))
       for order in (2, 3, 4) for k, kind in enumerate("nv")},
    "Kappa2": kappa2, "Kappa3": kappa3, "Phi": phi}
