"""SMILES to PyG graphs: one code path for training on SMILES files and for prediction.

A :class:`Featurizer` turns one SMILES string into a :class:`torch_geometric.data.Data` with long
``x`` ``[N, F_node]``, ``edge_index`` ``[2, E]`` (both directions of each bond) and ``edge_attr``
``[E, F_edge]``, or raises :class:`FeaturizationError` with a short reason for the user. Its
:meth:`~Featurizer.to_config` is plain JSON-able data, so it travels inside a checkpoint.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import torch
from ogb.utils import features as ogb_features
from rdkit import Chem, rdBase
from torch_geometric.data import Data

#: The 28 atom tokens of the ZINC benchmark (``atom_dict.pickle`` of benchmarking-gnns), in order.
ZINC_ATOM_VOCAB: tuple[str, ...] = (
    'C', 'O', 'N', 'F', 'C H1', 'S', 'Cl', 'O -', 'N H1 +', 'Br', 'N H3 +', 'N H2 +', 'N +',
    'N -', 'S -', 'I', 'P', 'O H1 +', 'N H1 -', 'O +', 'S +', 'P H1', 'P H2', 'C H2 -', 'P +',
    'S H1 +', 'C H1 -', 'P H1 +',
)  # fmt: skip
_ZINC_BONDS = {Chem.BondType.SINGLE: 1, Chem.BondType.DOUBLE: 2, Chem.BondType.TRIPLE: 3}
_LOG_PREFIX = re.compile(r'^\[\d\d:\d\d:\d\d\]\s*(SMILES Parse Error:\s*)?')


class FeaturizationError(ValueError):
    """A SMILES that cannot be featurized; the message is a short reason for the user."""


def _rdkit_reason(messages: str) -> str:
    """First informative line of RDKit's error log, without timestamp, at most 160 chars."""
    for line in messages.splitlines():
        if line := ' '.join(_LOG_PREFIX.sub('', line).split()):
            return line if len(line) <= 160 else line[:157] + '...'
    return ''


def parse_smiles(smiles: Any) -> Chem.Mol:
    """Parses a SMILES (stripped) with RDKit, sanitized, keeping RDKit's log off stderr.

    ``None`` and NaN (an empty CSV cell read by pandas) count as empty SMILES.

    Raises:
        FeaturizationError: ``empty SMILES``, ``invalid SMILES: <RDKit's reason>``, ...
    """
    if smiles is None or (isinstance(smiles, float) and math.isnan(smiles)):
        raise FeaturizationError('empty SMILES')
    if not isinstance(smiles, str):
        raise FeaturizationError(f'expected a SMILES string, got {type(smiles).__name__}')
    text = smiles.strip()
    if not text:
        raise FeaturizationError('empty SMILES')
    capture = getattr(rdBase, 'CaptureErrorLog', None)  # RDKit >= 2026.09
    log = ''
    with rdBase.BlockLogs():
        try:
            if capture is None:
                mol = Chem.MolFromSmiles(text)
            else:
                with capture() as captured:
                    mol = Chem.MolFromSmiles(text)
                log = captured.messages
        except Exception as e:  # RDKit raises for a few pathological strings
            mol, log = None, str(e)
    if mol is None:
        reason = _rdkit_reason(log)
        raise FeaturizationError(f'invalid SMILES: {reason}' if reason else 'invalid SMILES')
    if mol.GetNumAtoms() == 0:
        raise FeaturizationError('molecule has 0 atoms')
    return mol


def _atoms(mol: Chem.Mol) -> list[Chem.Atom]:
    """The atoms, by index (RDKit's ``GetAtoms()`` wrapper costs ~5 us per item in Python)."""
    return [mol.GetAtomWithIdx(i) for i in range(mol.GetNumAtoms())]


def _bonds(mol: Chem.Mol) -> list[Chem.Bond]:
    """The bonds, by index (see :func:`_atoms`)."""
    return [mol.GetBondWithIdx(i) for i in range(mol.GetNumBonds())]


def _edge_tensors(
    pairs: list[tuple[int, int]], feats: list[list[int]], width: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``edge_index`` ``[2, E]`` and ``edge_attr`` ``[E, width]`` long tensors (E may be 0)."""
    edge_index = torch.tensor(pairs, dtype=torch.long).reshape(-1, 2).t().contiguous()
    return edge_index, torch.tensor(feats, dtype=torch.long).reshape(-1, width)


class Featurizer(ABC):
    """SMILES to graph; subclasses define the atom and bond features.

    Attributes:
        name: Registry name (``build_featurizer(name)``).
        atom_feature_dims: Vocabulary size of each column of ``x``.
        edge_feature_dims: Vocabulary size of each column of ``edge_attr``.
        max_atoms: Molecules with more (heavy) atoms are refused; ``None`` for no limit.
    """

    name: ClassVar[str]
    atom_feature_dims: list[int]
    edge_feature_dims: list[int]

    def __init__(self, max_atoms: int | None = None) -> None:
        if max_atoms is not None and (isinstance(max_atoms, bool) or int(max_atoms) != max_atoms
                                      or max_atoms < 1):
            raise ValueError(f'max_atoms must be a positive integer or None, got {max_atoms!r}')
        self.max_atoms = None if max_atoms is None else int(max_atoms)

    def __call__(self, smiles: str) -> Data:
        """``Data(x, edge_index, edge_attr, num_nodes)`` (long tensors) of one SMILES.

        Raises:
            FeaturizationError: For anything that cannot be featurized, with a short reason.
        """
        mol = parse_smiles(smiles)
        n = mol.GetNumAtoms()
        if self.max_atoms is not None and n > self.max_atoms:
            raise FeaturizationError(
                f'molecule has {n} atoms; this model supports at most {self.max_atoms}')
        try:
            x, edge_index, edge_attr = self._featurize(mol)
        except FeaturizationError:
            raise
        except Exception as e:  # never let user input crash the caller with another type
            raise FeaturizationError(f'could not featurize: {e}') from e
        for kind, values, dims in [('atom', x, self.atom_feature_dims),
                                   ('bond', edge_attr, self.edge_feature_dims)]:
            if values.numel() and (bool((values.min(0).values < 0).any())
                                   or any(m >= d for m, d in zip(values.max(0).values.tolist(),
                                                                 dims, strict=True))):
                raise FeaturizationError(f'{kind} feature outside the {self.name} vocabulary')
        return Data(x=x, edge_index=edge_index, edge_attr=edge_attr, num_nodes=n)

    @abstractmethod
    def _featurize(self, mol: Chem.Mol) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x``, ``edge_index``, ``edge_attr`` of a parsed, non-empty molecule."""

    def to_config(self) -> dict[str, Any]:
        """Plain JSON-able description, rebuilt by :func:`featurizer_from_config`."""
        return {'name': self.name, 'max_atoms': self.max_atoms,
                'atom_feature_dims': list(self.atom_feature_dims),
                'edge_feature_dims': list(self.edge_feature_dims)}


def _zinc_token(atom: Chem.Atom) -> str:
    """Symbol, `` H<n>`` (explicit Hs, not on neutral aromatic N), then `` +``/`` -``."""
    token = atom.GetSymbol()
    charge = atom.GetFormalCharge()
    h = atom.GetNumExplicitHs()
    if h and not (token == 'N' and charge == 0 and atom.GetIsAromatic()):
        token += f' H{h}'
    return token + (' +' if charge > 0 else ' -' if charge < 0 else '')


class ZincFeaturizer(Featurizer):
    """The ZINC benchmark featurization (PyG ``torch_geometric.datasets.ZINC``).

    ``x`` ``[N, 1]`` is the atom token's index in the ZINC vocabulary; ``edge_attr`` ``[E, 1]`` is
    the bond type after ``Chem.Kekulize(clearAromaticFlags=True)``: 1 single, 2 double,
    3 triple. Edges are ordered by (source, target), as PyG's ``adj.nonzero()``. Tokens are read
    before kekulization from the SMILES as written; when one is missing from the vocabulary only
    because of superfluous bracket hydrogens (``C[NH]C``), the canonical SMILES is tried once.

    Args:
        max_atoms: Largest molecule accepted (``None``: no limit).
        vocab: Atom tokens in index order; defaults to :data:`ZINC_ATOM_VOCAB`.
    """

    name = 'zinc'

    def __init__(self, max_atoms: int | None = None, vocab: Sequence[str] | None = None) -> None:
        super().__init__(max_atoms)
        self.vocab = list(ZINC_ATOM_VOCAB if vocab is None else vocab)
        if len(set(self.vocab)) != len(self.vocab) or not self.vocab:
            raise ValueError('vocab must be a non-empty list of distinct tokens')
        self._index = {t: i for i, t in enumerate(self.vocab)}
        self.atom_feature_dims = [len(self.vocab)]
        self.edge_feature_dims = [4]

    def _atom_types(self, mol: Chem.Mol) -> list[int]:
        types = []
        for atom in _atoms(mol):
            token = _zinc_token(atom)
            if token not in self._index:
                raise FeaturizationError(
                    f"atom '{atom.GetSymbol()}' (token '{token}') not in the ZINC vocabulary")
            types.append(self._index[token])
        return types

    def _featurize(self, mol: Chem.Mol) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        try:
            atoms = self._atom_types(mol)
        except FeaturizationError as original:
            with rdBase.BlockLogs():
                canonical = Chem.MolFromSmiles(Chem.MolToSmiles(mol))
            if canonical is None or canonical.GetNumAtoms() != mol.GetNumAtoms():
                raise
            try:
                atoms = self._atom_types(canonical)
            except FeaturizationError:
                raise original from None
            mol = canonical
        mol = Chem.Mol(mol)
        with rdBase.BlockLogs():
            Chem.Kekulize(mol, clearAromaticFlags=True)
        edges: dict[tuple[int, int], int] = {}
        for bond in _bonds(mol):
            i, j, bond_type = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx(), bond.GetBondType()
            if bond_type not in _ZINC_BONDS:
                raise FeaturizationError(f'bond {bond_type.name.lower()} between atoms {i} and {j} '
                                         'not in the ZINC vocabulary (single, double, triple)')
            edges[i, j] = edges[j, i] = _ZINC_BONDS[bond_type]
        pairs = sorted(edges)
        edge_index, edge_attr = _edge_tensors(pairs, [[edges[p]] for p in pairs], 1)
        return torch.tensor(atoms, dtype=torch.long).view(-1, 1), edge_index, edge_attr

    def to_config(self) -> dict[str, Any]:
        """Adds the ordered ``vocab`` to the base config."""
        return {**super().to_config(), 'vocab': list(self.vocab)}


class OgbFeaturizer(Featurizer):
    """OGB's molecule features, exactly as ``ogb.utils.smiles2graph`` (9 atom, 3 bond columns).

    The SMILES is parsed once, checked, and featurized with the same OGB functions
    smiles2graph uses; edges come in smiles2graph's order ((i, j), (j, i) per bond).

    Args:
        max_atoms: Largest molecule accepted (``None``: no limit).
    """

    name = 'ogb'

    def __init__(self, max_atoms: int | None = None) -> None:
        super().__init__(max_atoms)
        self.atom_feature_dims = list(ogb_features.get_atom_feature_dims())
        self.edge_feature_dims = list(ogb_features.get_bond_feature_dims())

    def _featurize(self, mol: Chem.Mol) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = [ogb_features.atom_to_feature_vector(atom) for atom in _atoms(mol)]
        pairs: list[tuple[int, int]] = []
        feats: list[list[int]] = []
        for bond in _bonds(mol):
            i, j = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
            try:
                feat = ogb_features.bond_to_feature_vector(bond)
            except ValueError:  # OGB indexes bond stereo without a 'misc' fallback
                raise FeaturizationError(f'bond stereo {bond.GetStereo().name} between atoms {i} '
                                         f'and {j} not in the OGB vocabulary') from None
            pairs += [(i, j), (j, i)]
            feats += [feat, feat]
        edge_index, edge_attr = _edge_tensors(pairs, feats, len(self.edge_feature_dims))
        return torch.tensor(x, dtype=torch.long), edge_index, edge_attr


_REGISTRY: dict[str, type[Featurizer]] = {'zinc': ZincFeaturizer, 'ogb': OgbFeaturizer}


def build_featurizer(name: str, **kwargs: Any) -> Featurizer:
    """Featurizer by registry name (``'zinc'`` or ``'ogb'``), with its constructor arguments."""
    if name not in _REGISTRY:
        raise ValueError(f'unknown featurizer {name!r}; choose from {sorted(_REGISTRY)}')
    return _REGISTRY[name](**kwargs)


def featurizer_from_config(config: dict[str, Any]) -> Featurizer:
    """Rebuilds a featurizer from :meth:`Featurizer.to_config` (e.g. read from a checkpoint).

    Raises:
        ValueError: Unknown name or arguments, or feature dims unlike this installation's.
    """
    kwargs = dict(config)
    name = kwargs.pop('name', None)
    dims = {key: kwargs.pop(key, None) for key in ('atom_feature_dims', 'edge_feature_dims')}
    try:
        featurizer = build_featurizer(name, **kwargs)
    except TypeError as e:
        raise ValueError(f'bad featurizer config {config!r}: {e}') from e
    for key, value in dims.items():
        if value is not None and list(value) != getattr(featurizer, key):
            raise ValueError(f'{name} featurizer config has {key}={value}, but this installation '
                             f'gives {getattr(featurizer, key)}')
    return featurizer


def featurize_many(
    smiles: Iterable[str], featurizer: Featurizer
) -> tuple[list[Data | None], list[str | None]]:
    """Featurizes a column of SMILES without stopping at bad rows.

    Returns:
        Per row, the graph or ``None``, and ``None`` or the reason it failed.
    """
    graphs: list[Data | None] = []
    errors: list[str | None] = []
    for s in smiles:
        try:
            graph, error = featurizer(s), None
        except FeaturizationError as e:
            graph, error = None, str(e)
        graphs.append(graph)
        errors.append(error)
    return graphs, errors
