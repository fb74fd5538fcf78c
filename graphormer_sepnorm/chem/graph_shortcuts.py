"""RDKit's Python-implemented graph descriptors, bit for bit, from one pass over the molecule.

RDKit computes several of :class:`~graphormer_sepnorm.chem.mol_features.RDKit2D`'s descriptors
in Python, each looping over the atoms or bonds on its own (and RDKit's ``GetAtoms`` iterator
costs about 0.7 us an atom). Here the atoms' and bonds' properties are read once a molecule
(:func:`mol_tables`, cached on it as RDKit caches its own work) and each descriptor is computed
from them with RDKit's own arithmetic, in RDKit's order wherever floats are summed.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from rdkit import Chem
from rdkit.Chem import GraphDescriptors, rdmolops
from rdkit.ML.InfoTheory import entropy

__all__ = ["MolTables", "avg_ipc", "balaban_j", "bertz_ct", "cached_tables",
           "characteristic_polynomial", "chi0", "chi1", "mol_tables", "num_valence_electrons",
           "spacial_score"]

_TABLE = Chem.GetPeriodicTable()
#: Outer-shell electrons by atomic number (RDKit's periodic table).
OUTER = np.array([_TABLE.GetNOuterElecs(z) for z in range(119)], dtype=np.int64)
#: SPS's hybridisation term by RDKit's ``HybridizationType`` value: SP 1, SP2 2, SP3 3, else 4.
SPS_HYBRID = np.array([4, 4, 1, 2, 3, 4, 4, 4, 4], dtype=np.int64)
_DOUBLE = int(Chem.BondType.DOUBLE)


class MolTables(NamedTuple):
    """Per atom and per bond (in RDKit's index order), the properties the shortcuts read.

    Also what OGB's atom and bond features read (``ogb_features``), so a molecule's atoms are
    read once for both. ``atoms`` and ``bonds`` hold the integer columns as matrices (the columns
    are their views; the boolean ones, copies).
    """

    atomic: np.ndarray  # atomic number
    aromatic: np.ndarray  # bool
    charge: np.ndarray  # formal charge
    degree: np.ndarray  # explicit neighbours
    hydrogens: np.ndarray  # GetTotalNumHs
    hybrid: np.ndarray  # int(GetHybridization())
    ring: np.ndarray  # bool, IsInRing
    chirality: np.ndarray  # int(GetChiralTag())
    radicals: np.ndarray  # GetNumRadicalElectrons
    begin: np.ndarray  # bond's begin atom
    end: np.ndarray  # bond's end atom
    bond_type: np.ndarray  # int(GetBondType())
    bond_stereo: np.ndarray  # int(GetStereo())
    conjugated: np.ndarray  # bool, GetIsConjugated
    bond_order: list[float]  # 1.5 for aromatic bonds, else GetBondTypeAsDouble (BertzCT's)
    atoms: np.ndarray  # [N, 9] int64: the atom columns above, in their order
    bonds: np.ndarray  # [E, 5] int64: the bond columns above, in their order


def mol_tables(mol: Chem.Mol) -> MolTables:
    """The molecule's :class:`MolTables`, computed once (cached on ``mol``, as RDKit does)."""
    cached = getattr(mol, "_graphormerTables", None)
    if cached is None:
        atoms = list(map(mol.GetAtomWithIdx, range(mol.GetNumAtoms())))
        rows = [(a.GetAtomicNum(), a.GetIsAromatic(), a.GetFormalCharge(), a.GetDegree(),
                 a.GetTotalNumHs(), int(a.GetHybridization()), a.IsInRing(),
                 int(a.GetChiralTag()), a.GetNumRadicalElectrons()) for a in atoms]
        bonds = list(map(mol.GetBondWithIdx, range(mol.GetNumBonds())))
        links = [(b.GetBeginAtomIdx(), b.GetEndAtomIdx(), int(b.GetBondType()),
                  int(b.GetStereo()), b.GetIsConjugated(),
                  1.5 if b.GetIsAromatic() else b.GetBondTypeAsDouble()) for b in bonds]
        atom_rows = np.array(rows, dtype=np.int64).reshape(-1, 9)  # one conversion, not nine
        link_rows = np.array(links, dtype=np.float64).reshape(-1, 6)  # small ints: exact
        bond_rows = link_rows[:, :5].astype(np.int64)
        columns = list(atom_rows.T)
        columns[1], columns[6] = columns[1].astype(bool), columns[6].astype(bool)
        links_columns = list(bond_rows.T)
        links_columns[4] = links_columns[4].astype(bool)
        cached = MolTables(*columns, *links_columns, link_rows[:, 5].tolist(), atom_rows,
                           bond_rows)
        mol._graphormerTables = cached
    return cached


def cached_tables(mol: Chem.Mol) -> MolTables | None:
    """The molecule's :class:`MolTables` if :func:`mol_tables` has read them, else ``None``."""
    return getattr(mol, "_graphormerTables", None)


def num_valence_electrons(mol: Chem.Mol) -> int:
    """``Descriptors.NumValenceElectrons``: outer electrons less charge plus hydrogens."""
    t = mol_tables(mol)
    return int((OUTER[t.atomic] - t.charge + t.hydrogens).sum())


def chi0(mol: Chem.Mol) -> float:
    """``GraphDescriptors.Chi0``: its sum, over atoms with neighbours, in atom order."""
    deltas = mol_tables(mol).degree
    return sum(np.sqrt(1. / deltas[deltas != 0].astype(float)))


def chi1(mol: Chem.Mol) -> float:
    """``GraphDescriptors.Chi1``: its sum of ``(d_i d_j)^-1/2``, in bond order."""
    t = mol_tables(mol)
    products = t.degree[t.begin] * t.degree[t.end]
    return sum(np.sqrt(1. / products[products != 0].astype(float)))


def spacial_score(mol: Chem.Mol) -> float:
    """``SpacialScore.SPS(mol)``: its integer score from the tables, over the heavy atoms.

    RDKit's stereo perception as SPS runs it (on a copy with potential stereo bonds found);
    the per-atom terms as arrays, summed as integers (exact in any order).
    """
    copy = Chem.Mol(mol)
    rdmolops.FindPotentialStereoBonds(copy)
    centers = Chem.FindMolChiralCenters(copy, includeUnassigned=True, includeCIP=False,
                                        useLegacyImplementation=False)
    t = mol_tables(mol)
    stereo = np.ones(len(t.atomic), dtype=np.int64)
    stereo[[index for index, _ in centers]] = 2
    for k in np.flatnonzero(t.bond_type == _DOUBLE).tolist():
        if copy.GetBondWithIdx(k).GetStereo() != Chem.BondStereo.STEREONONE:
            stereo[[t.begin[k], t.end[k]]] = 2
    ring = np.where(t.aromatic, 1, np.where(t.ring, 2, 1))
    score = int((SPS_HYBRID[t.hybrid] * stereo * ring * t.degree ** 2).sum())
    return score / copy.GetNumHeavyAtoms()


def balaban_j(mol: Chem.Mol) -> float:
    """``GraphDescriptors.BalabanJ(mol)``, its pair loop's terms as arrays.

    The same matrices (cached on ``mol`` as RDKit does); the terms summed one after the
    other, in RDKit's order.
    """
    try:
        dmat = mol._balabanMat
    except AttributeError:
        dmat = Chem.GetDistanceMatrix(mol, useBO=True, useAtomWts=False, force=False,
                                      prefix="Balaban")
        mol._balabanMat = dmat
    try:
        adjacency = mol._adjMat
    except AttributeError:
        adjacency = Chem.GetAdjacencyMatrix(mol, useBO=False, emptyVal=0, force=False,
                                            prefix="NoBO")
        mol._adjMat = adjacency
    sums = sum(dmat)  # RDKit's _VertexDegrees: row after row
    bonds, atoms = mol.GetNumBonds(), mol.GetNumAtoms()
    first, second = np.nonzero(np.triu(adjacency == 1))  # RDKit's i <= j, row by row
    total = 0.
    for term in (1. / np.sqrt(sums[first] * sums[second])).tolist():
        total += term
    cycles = bonds - atoms + 1
    return float(bonds) / float(cycles + 1) * total if cycles + 1 != 0 else 0


def _symmetry_classes(bdmat: np.ndarray, atoms: int, cutoff: int) -> list[int] | None:
    """BertzCT's symmetry classes, each distinct distance printed once.

    Atoms whose sorted distance rows print alike (``%.4f``) share a class, numbered by first
    appearance. ``None`` where a NaN or a negative zero is among the distances.
    """
    rows = np.sort(bdmat, axis=1)[:atoms, :cutoff]
    if np.isnan(rows).any() or np.signbit(rows).any():
        return None
    values, inverse = np.unique(rows, return_inverse=True)
    printed: dict[str, int] = {}
    ids = np.array([printed.setdefault("%.4f" % v, len(printed))  # noqa: UP031 (RDKit's)
                    for v in values.tolist()])
    seen: dict[bytes, int] = {}
    return [seen.setdefault(row.tobytes(), len(seen)) + 1
            for row in ids[inverse.reshape(rows.shape)]]


def bertz_ct(mol: Chem.Mol, cutoff: int = 100) -> float:
    """``GraphDescriptors.BertzCT(mol)``, its symmetry classes without a string a row.

    The connection counts entered in RDKit's order; RDKit's own entropy function.
    """
    atoms = mol.GetNumAtoms()
    if atoms < 2:
        return 0
    bdmat = Chem.GetDistanceMatrix(mol, useBO=True, useAtomWts=False, force=True,
                                   prefix="Balaban")
    mol._balabanMat = bdmat  # as RDKit's BertzCT leaves it
    classes = _symmetry_classes(bdmat, atoms, cutoff)
    if classes is None:
        return GraphDescriptors.BertzCT(mol, cutoff=cutoff)
    t = mol_tables(mol)
    orders: dict[tuple[int, int], float] = {}
    neighbors: list[list[int]] = [[] for _ in range(atoms)]
    for a, b, order in zip(t.begin.tolist(), t.end.tolist(), t.bond_order, strict=True):
        orders[min(a, b), max(a, b)] = order
        neighbors[a].append(b)
        neighbors[b].append(a)
    atom_types: dict[int, int] = {}
    connections: dict = {}
    for atom, number in enumerate(t.atomic.tolist()):
        atom_types[number] = atom_types.get(number, 0) + 1
        hinge = classes[atom]
        around = [(classes[n], orders[min(atom, n), max(atom, n)], n)
                  for n in sorted(set(neighbors[atom]))]
        for i, (ci, oi, ni) in enumerate(around):
            if oi > 1 and ni > atom:
                key = (min(hinge, ci), max(hinge, ci))
                connections[key] = connections.get(key, 0) + oi * (oi - 1) / 2
            for cj, oj, _ in around[i + 1:]:
                key = (min(ci, cj), hinge, max(ci, cj))
                connections[key] = connections.get(key, 0) + oi * oj
    return GraphDescriptors._CalculateEntropies(connections or {"a": 1}, atom_types, atoms)


def characteristic_polynomial(adjacency: np.ndarray) -> np.ndarray:
    """``Graphs.CharacteristicPolynomial(mol, adjacency)``, its floating operations unchanged.

    RDKit's Le Verrier-Faddeev-Frame loop: ``c_n = trace(A_n) / n``, ``B_n = A_n - c_n I``,
    ``A_{n+1} = A B_n``, in two buffers and their diagonals' views (``numpy.trace`` sums the
    same strided view). ``c_n I`` is ``c_n`` on the diagonal and ``c_n * 0.0`` off it, which
    subtracted changes nothing unless it is ``-0.0`` or NaN (then RDKit's subtraction runs); the
    boolean ``A`` is cast to float once, not by each ``numpy.dot``.
    """
    atoms = len(adjacency)
    matrix = adjacency.astype(np.float64)
    buffers = [matrix.copy(), np.empty_like(matrix)]
    diagonals = [buffer.reshape(-1)[::atoms + 1] for buffer in buffers]
    res = [1.0]
    for n in range(1, atoms + 1):
        now = (n + 1) % 2  # A_n's buffer (A_1: the boolean matrix, its float copy)
        value = 1. / n * (adjacency.trace() if n == 1 else diagonals[now].sum())
        res.append(value)
        zero = value * 0.0
        if math.copysign(1.0, zero) < 0 or zero != zero:
            np.subtract(buffers[now], value * np.identity(atoms), out=buffers[now])
        else:
            diagonals[now] -= value
        if n < atoms:  # RDKit's last product is never read
            np.dot(matrix, buffers[now], out=buffers[1 - now])
    polynomial = np.array(res, dtype=float)
    polynomial[1:] *= -1
    return polynomial


def avg_ipc(mol: Chem.Mol) -> float:
    """``GraphDescriptors.AvgIpc(mol)``: its Ipc with :func:`characteristic_polynomial`."""
    try:
        dmat = mol._adjMat  # RDKit's Ipc reads (and leaves) this
    except AttributeError:
        dmat = Chem.GetDistanceMatrix(mol, False)
        mol._adjMat = dmat
    adjacency = np.equal(dmat, 1)
    if adjacency.shape != (mol.GetNumAtoms(),) * 2:
        return GraphDescriptors.AvgIpc(mol)
    return entropy.InfoEntropy(abs(characteristic_polynomial(adjacency)))
