"""Which SMARTS patterns can possibly match a molecule, from the atoms and bonds they need.

RDKit's substructure match costs a few microseconds even where it fails, and most of the
fragment counts (``fr_*``) and QED's structural alerts fail on most molecules. A pattern needs
atoms of some types (element, aromaticity, sometimes formal charge) and bonds of some orders
between such atoms; where the molecule has none of one of these, the match cannot succeed and
its result (0 matches, no alert) is known without running it.

Each pattern's needs are read from RDKit's own parse of its query atoms and bonds
(``DescribeQuery``), conservatively: a query part this module does not read (a negation, a ring
or hydrogen count, a bond query other than single, double, triple, aromatic or single-or-
aromatic) needs nothing. Recursive SMARTS (``$(...)``) need what their own pattern needs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
from rdkit import Chem

from graphormer_sepnorm.chem.graph_shortcuts import mol_tables

__all__ = ["PatternScreen", "molecule_keys", "pattern_clauses"]

#: An atom's type: atomic number, plus this for aromatic atoms (RDKit's ``AtomType`` query).
AROMATIC = 1000
#: Most alternatives a clause, or clauses a pattern, kept (dropping some only needs less).
CAP = 64
#: Bond types a query may ask for (RDKit's ``BondType`` values), as 1..4 in the keys.
BOND_CODES = {1: 1, 2: 2, 3: 3, 12: 4}
#: The same codes by twice the bond order RDKit's adjacency matrix gives (3: aromatic).
_ORDER_CODES = np.array([0, 0, 1, 4, 2, 0, 3, 0, 0, 0, 0, 0, 0], dtype=np.int64)
BOND_QUERIES = {"BondOrder 1 = val": (1,), "BondOrder 2 = val": (2,), "BondOrder 3 = val": (3,),
                "BondOrder 12 = val": (12,), "SingleOrAromaticBond 1 = val": (1, 12)}
_TYPE = re.compile(r"^(AtomAtomicNum|AtomType|AtomFormalCharge) (-?\d+) = val$")

Clauses = list[frozenset[int]]  # all clauses must hold; a clause holds if one of its keys is there
Possible = frozenset[tuple[int | None, int | None]] | None  # (type, charge) an atom may have


def atom_key(kind: int | None, charge: int | None) -> int | None:
    """The feature key of an atom type, or of a type with a formal charge (``None``: no key)."""
    if kind is None:
        return None
    return kind if charge is None else 10_000 + kind * 64 + charge + 32


def bond_key(kind1: int, kind2: int, code: int) -> int:
    """The feature key of a bond of ``code`` (:data:`BOND_CODES`) between two atom types."""
    low, high = min(kind1, kind2), max(kind1, kind2)
    return 1 << 30 | (low * 4096 + high) << 3 | code


def molecule_keys(mol: Chem.Mol) -> np.ndarray:
    """The feature keys a molecule has (repeats included): atom types, typed charges, bonds."""
    tables = mol_tables(mol)  # the atoms read once a molecule (cached on it)
    kinds = tables.atomic + AROMATIC * tables.aromatic
    charges = tables.charge
    # bond orders of the adjacency matrix: 1 single (or dative), 1.5 aromatic (or one and a
    # half), 2, 3; a key for a bond type it stands in for too only lets more patterns through
    orders = Chem.GetAdjacencyMatrix(mol, useBO=True, force=True, prefix="_screen")
    first, second = np.nonzero(np.triu(orders))
    codes = _ORDER_CODES[np.clip(np.rint(2 * orders[first, second]), 0, 12).astype(np.int64)]
    low, high = np.minimum(kinds[first], kinds[second]), np.maximum(kinds[first], kinds[second])
    bonds = 1 << 30 | (low * 4096 + high) << 3 | codes
    return np.concatenate([kinds, 10_000 + kinds * 64 + charges + 32, bonds[codes > 0]])


def _tree(text: str) -> tuple[str, list]:
    """``DescribeQuery``'s indented text as ``(line, children)``."""
    stack: list[tuple[int, list]] = [(-1, [])]
    for line in filter(str.strip, text.splitlines()):
        depth = (len(line) - len(line.lstrip())) // 2
        while stack[-1][0] >= depth:
            stack.pop()
        node = (line.strip(), [])
        stack[-1][1].append(node)
        stack.append((depth, node[1]))
    (root,) = stack[0][1]
    return root


def _recursions(smarts: str) -> list[str]:
    """The ``$(...)`` parts of an atom's SMARTS, outside any other, in order."""
    found, k = [], 0
    while (k := smarts.find("$(", k)) >= 0:
        depth, end = 0, k + 1
        for end in range(k + 1, len(smarts)):
            depth += {"(": 1, ")": -1}.get(smarts[end], 0)
            if depth == 0:
                break
        found.append(smarts[k + 2:end])
        k = end + 1
    return found


def _or(first: Clauses, second: Clauses) -> Clauses:
    """Clauses implied by either of two sets of clauses (each pair's union), at most CAP."""
    joined: Clauses = []
    for a in first:
        for b in second:
            if (a | b) not in joined and len(joined) < CAP:
                joined.append(a | b)
    return joined


def _meet(first: Possible, second: Possible) -> Possible:
    """(type, charge) pairs allowed by both (``None``: anything; a ``None`` part: any value)."""
    if first is None or second is None:
        return second if first is None else first
    both = set()
    for t1, q1 in first:
        for t2, q2 in second:
            if None in (t1, t2) or t1 == t2:
                if None in (q1, q2) or q1 == q2:
                    both.add((t2 if t1 is None else t1, q2 if q1 is None else q1))
    return frozenset(both)


def _atom(node: tuple[str, list], recursions: list[str | None]) -> tuple[Possible, Clauses]:
    """What atoms a query node allows, and the clauses its recursive patterns need."""
    line, children = node
    if match := _TYPE.match(line):
        kind, value = match.group(1), int(match.group(2))
        if kind == "AtomFormalCharge":
            return frozenset({(None, value)}), []
        kinds = (value, value + AROMATIC) if kind == "AtomAtomicNum" else (value,)
        return frozenset((t, None) for t in kinds), []
    if line.startswith("RecursiveStructure"):
        inner = recursions.pop(0)
        if inner is None or not line.endswith("val in ()"):  # a negated one needs nothing
            return None, []
        return pattern_clauses(Chem.MolFromSmarts(inner))
    parts = [_atom(child, recursions) for child in children]  # consumes recursions in order
    if line == "AtomAnd":
        possible: Possible = None
        for allowed, _ in parts:
            possible = _meet(possible, allowed)
        return possible, list(dict.fromkeys(c for _, clauses in parts for c in clauses))
    if line == "AtomOr" and all(allowed is not None for allowed, _ in parts):
        clauses = parts[0][1]
        for _, more in parts[1:]:
            clauses = _or(clauses, more)
        return frozenset().union(*(allowed for allowed, _ in parts)), clauses
    return None, []  # anything else (negated, counts, rings, ...) allows any atom


def _clause(possible: Possible) -> frozenset[int] | None:
    """The clause "an atom the query allows is there", where every allowed one has a key."""
    keys = {atom_key(kind, charge) for kind, charge in possible or ()}
    return frozenset(keys) if possible and None not in keys else None


def _count(node: tuple[str, list]) -> int:
    return node[0].startswith("RecursiveStructure") + sum(_count(c) for c in node[1])


def pattern_clauses(pattern: Chem.Mol) -> tuple[Possible, Clauses]:
    """What the pattern's first atom allows, and the clauses any match of it needs.

    Every query atom needs a molecule atom it allows; every query bond of a known order needs
    a bond of that order between atom types its ends allow. ``GetSmarts`` writes an atom's
    query tree depth first, so its ``$(...)`` parts come in the tree's order.
    """
    clauses: Clauses = []
    allowed = []
    for atom in pattern.GetAtoms():
        tree = _tree(atom.DescribeQuery())
        recursions: list[str | None] = _recursions(atom.GetSmarts())
        if len(recursions) != _count(tree):
            recursions = [None] * _count(tree)
        possible, needed = _atom(tree, recursions)
        allowed.append(possible)
        clauses += [c for c in (_clause(possible), *needed) if c is not None]
    for bond in pattern.GetBonds():
        ends = allowed[bond.GetBeginAtomIdx()], allowed[bond.GetEndAtomIdx()]
        orders = BOND_QUERIES.get(bond.DescribeQuery().strip(), ())
        kinds = [{t for t, _ in end or {(None, None)}} for end in ends]
        if any(None in k for k in kinds) or len(kinds[0]) * len(kinds[1]) * len(orders) > CAP:
            continue
        clauses.append(frozenset(bond_key(a, b, BOND_CODES[o]) for a in kinds[0]
                                 for b in kinds[1] for o in orders) or None)
    clauses = [c for c in dict.fromkeys(clauses) if c]
    # a clause weaker than another (a superset of it) adds nothing
    return (allowed[0] if allowed else None,
            [c for c in clauses if not any(o < c for o in clauses)][:CAP])


class PatternScreen:
    """For a list of patterns, which may match a molecule (``False``: it certainly does not).

    Args:
        patterns: RDKit query molecules (from SMARTS).

    Examples:
        >>> screen = PatternScreen([Chem.MolFromSmarts(s) for s in ("C=O", "[N+](=O)[O-]", "S")])
        >>> screen(Chem.MolFromSmiles("CC(=O)O")).tolist()
        [True, False, False]
    """

    def __init__(self, patterns: Sequence[Chem.Mol]) -> None:
        needs = [pattern_clauses(p)[1] for p in patterns]
        clauses = list(dict.fromkeys(c for need in needs for c in need))
        self.keys = np.array(sorted(set().union(*clauses)), dtype=np.int64)
        column = {key: k for k, key in enumerate(self.keys.tolist())}
        self.clauses = np.zeros((len(clauses), len(self.keys)), dtype=np.float32)
        for row, clause in enumerate(clauses):
            self.clauses[row, [column[key] for key in clause]] = 1.0
        row = {clause: k for k, clause in enumerate(clauses)}
        self.needs = np.zeros((len(patterns), len(clauses)), dtype=np.float32)
        for k, need in enumerate(needs):
            self.needs[k, [row[c] for c in need]] = 1.0

    def __call__(self, mol: Chem.Mol) -> np.ndarray:
        """``[len(patterns)]`` bool: ``False`` where the pattern cannot match ``mol``."""
        keys = molecule_keys(mol)
        at = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        present = np.zeros(len(self.keys), dtype=np.float32)
        present[at[self.keys[at] == keys]] = 1.0
        missing = (self.clauses @ present == 0).astype(np.float32)
        return self.needs @ missing == 0
