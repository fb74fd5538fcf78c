"""SMILES to PyG graphs: one code path for training on SMILES files and for prediction.

A :class:`Featurizer` turns one SMILES string into a :class:`torch_geometric.data.Data` with long
``x`` ``[N, F_node]``, ``edge_index`` ``[2, E]`` (both directions of each bond) and ``edge_attr``
``[E, F_edge]`` (and, with molecule features, float ``mol_x`` ``[1, F_mol]``: see
:mod:`~graphormer_sepnorm.chem.mol_features`), or raises :class:`FeaturizationError` with a short
reason for the user. The same
graph as plain numpy arrays (:meth:`~Featurizer.arrays`) is what prediction workers send between
processes. Its :meth:`~Featurizer.to_config` is plain JSON-able data, so it travels inside a
checkpoint.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, NamedTuple

import numpy as np
import torch
from ogb.utils import features as ogb_features
from rdkit import Chem, rdBase
from torch_geometric.data import Data

from graphormer_sepnorm.chem.layout import feature_columns
from graphormer_sepnorm.chem.mol_features import MolFeatures, build_mol_features
from graphormer_sepnorm.chem.ogb_features import atom_features, bond_features
from graphormer_sepnorm.chem.smiles import FeaturizationError, parse_smiles

__all__ = ['ZINC_ATOM_VOCAB', 'FeaturizationError', 'Featurizer', 'GraphArrays', 'OgbFeaturizer',
           'ZincFeaturizer', 'build_featurizer', 'featurize_many', 'featurizer_from_config',
           'parse_smiles']

#: The 28 atom tokens of the ZINC benchmark (``atom_dict.pickle`` of benchmarking-gnns), in order.
ZINC_ATOM_VOCAB: tuple[str, ...] = (
    'C', 'O', 'N', 'F', 'C H1', 'S', 'Cl', 'O -', 'N H1 +', 'Br', 'N H3 +', 'N H2 +', 'N +',
    'N -', 'S -', 'I', 'P', 'O H1 +', 'N H1 -', 'O +', 'S +', 'P H1', 'P H2', 'C H2 -', 'P +',
    'S H1 +', 'C H1 -', 'P H1 +',
)  # fmt: skip
_ZINC_BONDS = {Chem.BondType.SINGLE: 1, Chem.BondType.DOUBLE: 2, Chem.BondType.TRIPLE: 3}


class GraphArrays(NamedTuple):
    """One featurized molecule as numpy arrays (cheap to pickle between processes).

    Attributes:
        x: ``[N, F_node]`` int64 atom features.
        edge_index: ``[2, E]`` int64 directed edges, both directions of each bond.
        edge_attr: ``[E, F_edge]`` int64 bond features.
        mol_x: ``[F_mol]`` float32 molecule features, or ``None`` when the featurizer has none.
    """

    x: np.ndarray
    edge_index: np.ndarray
    edge_attr: np.ndarray
    mol_x: np.ndarray | None = None

    def to_data(self) -> Data:
        """The PyG ``Data`` (tensors sharing these arrays' memory; ``mol_x`` as ``[1, F]``)."""
        data = Data(x=torch.from_numpy(self.x), edge_index=torch.from_numpy(self.edge_index),
                    edge_attr=torch.from_numpy(self.edge_attr), num_nodes=len(self.x))
        if self.mol_x is not None:
            data.mol_x = torch.from_numpy(self.mol_x).reshape(1, -1)
        return data


def _atoms(mol: Chem.Mol) -> list[Chem.Atom]:
    """The atoms, by index (RDKit's ``GetAtoms()`` wrapper costs ~5 us per item in Python)."""
    return [mol.GetAtomWithIdx(i) for i in range(mol.GetNumAtoms())]


def _bonds(mol: Chem.Mol) -> list[Chem.Bond]:
    """The bonds, by index (see :func:`_atoms`)."""
    return [mol.GetBondWithIdx(i) for i in range(mol.GetNumBonds())]


def _in_range(values: np.ndarray, dims: Sequence[int]) -> bool:
    """Whether every column ``c`` of ``values`` ``[rows, len(dims)]`` lies in ``[0, dims[c])``."""
    return not values.size or bool(values.min() >= 0 and (values.max(0) < dims).all())


class Featurizer(ABC):
    """SMILES to graph; subclasses define the atom and bond features.

    Attributes:
        name: Registry name (``build_featurizer(name)``).
        atom_feature_dims: Vocabulary size of each column of ``x``.
        edge_feature_dims: Vocabulary size of each column of ``edge_attr``.
        max_atoms: Molecules with more (heavy) atoms are refused; ``None`` for no limit.
        mol_features: Names of the molecule features computed beside the graph
            (:data:`~graphormer_sepnorm.chem.mol_features.MOL_FEATURES`), in order.
        mol_feature_dim: Length of their concatenation (0 without).
    """

    name: ClassVar[str]
    atom_feature_dims: list[int]
    edge_feature_dims: list[int]

    def __init__(self, max_atoms: int | None = None, mol_features: Sequence[str] = ()) -> None:
        if max_atoms is not None and (isinstance(max_atoms, bool) or int(max_atoms) != max_atoms
                                      or max_atoms < 1):
            raise ValueError(f'max_atoms must be a positive integer or None, got {max_atoms!r}')
        self.max_atoms = None if max_atoms is None else int(max_atoms)
        self.mol_features = [str(n) for n in mol_features]
        self._generators: list[MolFeatures] = build_mol_features(self.mol_features)
        self.mol_feature_dim = sum(g.dim for g in self._generators)

    def __call__(self, smiles: str) -> Data:
        """``Data(x, edge_index, edge_attr, num_nodes)`` (long tensors) of one SMILES.

        Raises:
            FeaturizationError: For anything that cannot be featurized, with a short reason.
        """
        return self.arrays(smiles).to_data()

    def arrays(self, smiles: str) -> GraphArrays:
        """The graph of one SMILES as numpy arrays; raises as calling the featurizer does."""
        mol = parse_smiles(smiles)
        n = mol.GetNumAtoms()
        if self.max_atoms is not None and n > self.max_atoms:
            raise FeaturizationError(
                f'molecule has {n} atoms; this model supports at most {self.max_atoms}')
        try:
            # before _featurize, which may modify the molecule
            mol_x = (np.concatenate([g(mol) for g in self._generators])
                     if self._generators else None)
            graph = self._featurize(mol)._replace(mol_x=mol_x)
        except FeaturizationError:
            raise
        except Exception as e:  # never let user input crash the caller with another type
            raise FeaturizationError(f'could not featurize: {e}') from e
        for kind, values, dims in [('atom', graph.x, self.atom_feature_dims),
                                   ('bond', graph.edge_attr, self.edge_feature_dims)]:
            if not _in_range(values, dims):
                raise FeaturizationError(f'{kind} feature outside the {self.name} vocabulary')
        return graph

    @abstractmethod
    def _featurize(self, mol: Chem.Mol) -> GraphArrays:
        """The graph of a freshly parsed, non-empty molecule (which it may modify)."""

    def to_config(self) -> dict[str, Any]:
        """Plain JSON-able description, rebuilt by :func:`featurizer_from_config`."""
        config = {'name': self.name, 'max_atoms': self.max_atoms,
                  'atom_feature_dims': list(self.atom_feature_dims),
                  'edge_feature_dims': list(self.edge_feature_dims)}
        if self.mol_features:  # absent otherwise: configs stay those of older checkpoints
            config['mol_features'] = list(self.mol_features)
            # where each feature sits in mol_x, for what reads them without RDKit (the GP)
            config['mol_feature_columns'] = {name: list(cols) for name, cols in
                                             feature_columns(self.mol_features).items()}
        return config


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
        mol_features: Molecule features beside the graph (see :class:`Featurizer`).
    """

    name = 'zinc'

    def __init__(self, max_atoms: int | None = None, vocab: Sequence[str] | None = None,
                 mol_features: Sequence[str] = ()) -> None:
        super().__init__(max_atoms, mol_features)
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

    def _featurize(self, mol: Chem.Mol) -> GraphArrays:
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
        with rdBase.BlockLogs():  # in place: the molecule was parsed for this call
            Chem.Kekulize(mol, clearAromaticFlags=True)
        # Bond orders as a matrix: one RDKit call instead of four per bond. Its nonzero
        # entries come sorted by (source, target), PyG's order. A dative bond is one-sided,
        # so any bond but single, double or triple changes the count or the values.
        order = Chem.GetAdjacencyMatrix(mol, useBO=True, force=True)
        source, target = np.nonzero(order)
        kinds = order[source, target]
        if len(kinds) != 2 * mol.GetNumBonds() or not (
                (kinds == 1) | (kinds == 2) | (kinds == 3)).all():
            _raise_bond_outside_zinc(mol)
        return GraphArrays(np.asarray(atoms, dtype=np.int64).reshape(-1, 1),
                           np.stack([source, target]).astype(np.int64),
                           kinds.astype(np.int64).reshape(-1, 1))

    def to_config(self) -> dict[str, Any]:
        """Adds the ordered ``vocab`` to the base config."""
        return {**super().to_config(), 'vocab': list(self.vocab)}


def _raise_bond_outside_zinc(mol: Chem.Mol) -> None:
    """Raises for the first bond that is not single, double or triple."""
    for bond in _bonds(mol):
        if bond.GetBondType() not in _ZINC_BONDS:
            raise FeaturizationError(
                f'bond {bond.GetBondType().name.lower()} between atoms {bond.GetBeginAtomIdx()} '
                f'and {bond.GetEndAtomIdx()} not in the ZINC vocabulary (single, double, triple)')
    raise FeaturizationError('bond outside the ZINC vocabulary (single, double, triple)')


class OgbFeaturizer(Featurizer):
    """OGB's molecule features, exactly as ``ogb.utils.smiles2graph`` (9 atom, 3 bond columns).

    The SMILES is parsed once, checked, and featurized with OGB's feature lists (lookups cached,
    :mod:`graphormer_sepnorm.chem.ogb_features`); edges come in smiles2graph's order ((i, j), (j, i)
    per bond).

    Args:
        max_atoms: Largest molecule accepted (``None``: no limit).
        mol_features: Molecule features beside the graph (see :class:`Featurizer`).
    """

    name = 'ogb'

    def __init__(self, max_atoms: int | None = None, mol_features: Sequence[str] = ()) -> None:
        super().__init__(max_atoms, mol_features)
        self.atom_feature_dims = list(ogb_features.get_atom_feature_dims())
        self.edge_feature_dims = list(ogb_features.get_bond_feature_dims())

    def _featurize(self, mol: Chem.Mol) -> GraphArrays:
        bonds = _bonds(mol)
        x = np.array([atom_features(atom) for atom in _atoms(mol)], dtype=np.int64)
        ends = np.array([(b.GetBeginAtomIdx(), b.GetEndAtomIdx()) for b in bonds],
                        dtype=np.int64).reshape(-1, 2)
        attr = np.array([_ogb_bond(b) for b in bonds], dtype=np.int64).reshape(-1, 3)
        pairs = np.concatenate([ends, ends[:, ::-1]], 1).reshape(-1, 2)  # (i, j), (j, i) a bond
        return GraphArrays(x, pairs.T.copy(), np.repeat(attr, 2, axis=0))


def _ogb_bond(bond: Chem.Bond) -> list[int]:
    """OGB's features of ``bond``; raises for a stereo OGB has no place for (as OGB does)."""
    try:
        return bond_features(bond)
    except ValueError:  # OGB indexes bond stereo without a 'misc' fallback
        raise FeaturizationError(
            f'bond stereo {bond.GetStereo().name} between atoms {bond.GetBeginAtomIdx()} and '
            f'{bond.GetEndAtomIdx()} not in the OGB vocabulary') from None


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
    kwargs.pop('mol_feature_columns', None)  # derived from mol_features
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
    smiles: Iterable[str], featurizer: Featurizer, as_arrays: bool = False
) -> tuple[list[Any], list[str | None]]:
    """Featurizes a column of SMILES without stopping at bad rows.

    Args:
        smiles: The SMILES, one per row.
        featurizer: What turns one into a graph.
        as_arrays: Give :class:`GraphArrays` instead of PyG ``Data``.

    Returns:
        Per row, the graph or ``None``, and ``None`` or the reason it failed.
    """
    featurize = featurizer.arrays if as_arrays else featurizer
    graphs: list[Any] = []
    errors: list[str | None] = []
    for s in smiles:
        try:
            graph, error = featurize(s), None
        except FeaturizationError as e:
            graph, error = None, str(e)
        graphs.append(graph)
        errors.append(error)
    return graphs, errors
