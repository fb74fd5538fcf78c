"""Splits of a table's rows: scaffold, random, and their k folds.

Every function returns row indices (into the molecules it was given) of train, validation and
test, each sorted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
from rdkit import rdBase
from rdkit.Chem.Scaffolds import MurckoScaffold

__all__ = ["fold_split", "murcko_scaffold", "random_split", "scaffold_split"]


def murcko_scaffold(smiles: str) -> str:
    """Bemis-Murcko scaffold SMILES (no chirality); ``''`` for acyclic molecules."""
    with rdBase.BlockLogs():
        return MurckoScaffold.MurckoScaffoldSmiles(smiles=smiles, includeChirality=False)


def _groups(scaffolds: Sequence[str], seed: int | None) -> list[list[int]]:
    """Rows grouped by scaffold, largest group first, ties in :func:`_tie_key` order."""
    groups: dict[str, list[int]] = {}
    for i, scaffold in enumerate(scaffolds):
        groups.setdefault(scaffold, []).append(i)
    order = sorted(groups, key=lambda s: (-len(groups[s]), _tie_key(s, seed)))
    return [groups[s] for s in order]


def _tie_key(scaffold: str, seed: int | None) -> str:
    """Order of equal-sized scaffold groups: a seeded hash, or file order (``''``, stable sort)."""
    if seed is None:
        return ""
    return hashlib.sha256(f"{seed}:{scaffold}".encode()).hexdigest()


def scaffold_split(scaffolds: Sequence[str], sizes: Sequence[float],
                   seed: int | None = 0) -> list[list[int]]:
    """Deterministic scaffold split, its ties in an order that does not depend on the file.

    Molecules are grouped by scaffold; groups, largest first, fill train up to its share, then
    validation, then test. A scaffold never spans two splits, so the shares are met only
    approximately. Groups of equal size (most are single molecules) are ordered by a hash of
    ``seed`` and the scaffold, not by where they appear in the file (a file sorted by activity
    would otherwise send its last rows' scaffolds to test). ``seed=None`` keeps file order for
    ties, as OGB's and chemprop's ``balanced=False`` split do.
    """
    n = len(scaffolds)
    train_cut, val_cut = sizes[0] * n, (sizes[0] + sizes[1]) * n
    out: list[list[int]] = [[], [], []]
    for group in _groups(scaffolds, seed):
        if len(out[0]) + len(group) <= train_cut:
            out[0] += group
        elif len(out[0]) + len(out[1]) + len(group) <= val_cut:
            out[1] += group
        else:
            out[2] += group
    return [sorted(indices) for indices in out]


def random_split(n: int, sizes: Sequence[float], seed: int) -> list[list[int]]:
    """Seeded random split: ``round(share * n)`` rows for train and val, the rest for test."""
    order = np.random.default_rng(seed).permutation(n).tolist()
    n_train = round(sizes[0] * n)
    n_val = round((sizes[0] + sizes[1]) * n) - n_train
    parts = [order[:n_train], order[n_train:n_train + n_val], order[n_train + n_val:]]
    return [sorted(p) for p in parts]


def fold_split(n: int, folds: int, fold: int, seed: int,
               scaffolds: Sequence[str] | None = None) -> list[list[int]]:
    """Fold ``fold`` of ``folds``: test is that fold, validation the next, train the rest.

    Random folds are a seeded permutation cut into ``folds`` near-equal parts. With
    ``scaffolds``, whole scaffold groups go to the fold with the fewest molecules so far
    (largest groups first, ties hashed from ``seed``), so no scaffold spans two folds. Across
    ``fold = 0 .. folds - 1`` every molecule is tested exactly once.

    Raises:
        ValueError: fewer than 3 folds, or ``fold`` outside ``[0, folds)``.
    """
    if folds < 3:
        raise ValueError(f"num_folds must be at least 3 (test, validation and training folds), "
                         f"got {folds}")
    if not 0 <= fold < folds:
        raise ValueError(f"fold must be in [0, {folds}), got {fold}")
    owner = np.empty(n, dtype=np.int64)
    if scaffolds is None:
        order = np.random.default_rng(seed).permutation(n)
        owner[order] = np.arange(n) * folds // max(n, 1)
    else:
        sizes = np.zeros(folds, dtype=np.int64)
        for group in _groups(scaffolds, seed):
            target = int(np.argmin(sizes))
            owner[group] = target
            sizes[target] += len(group)
    val = (fold + 1) % folds
    return [np.flatnonzero((owner != fold) & (owner != val)).tolist(),
            np.flatnonzero(owner == val).tolist(), np.flatnonzero(owner == fold).tolist()]
