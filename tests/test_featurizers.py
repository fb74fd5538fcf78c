import csv
import io
import json
import os
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from ogb.utils import smiles2graph

from graphormer_sepnorm.chem import featurizers as fz
from graphormer_sepnorm.chem.featurizers import (
    ZINC_ATOM_VOCAB,
    FeaturizationError,
    OgbFeaturizer,
    ZincFeaturizer,
    build_featurizer,
    featurize_many,
    featurizer_from_config,
)

SHARED_DATA = Path(__file__).resolve().parents[2] / 'shared' / 'data'
T = {t: i for i, t in enumerate(ZINC_ATOM_VOCAB)}


def tokens(graph):
    return [ZINC_ATOM_VOCAB[i] for i in graph.x.view(-1).tolist()]


def bonds(graph):
    """Undirected bonds {(i, j): type}, checking both directions carry the same type."""
    out = {}
    for (i, j), t in zip(graph.edge_index.t().tolist(), graph.edge_attr.view(-1).tolist(),
                         strict=True):
        out.setdefault((min(i, j), max(i, j)), []).append(t)
    assert all(len(v) == 2 and v[0] == v[1] for v in out.values())
    return {k: v[0] for k, v in out.items()}


def check_shapes(graph, f_node, f_edge):
    n, e = graph.num_nodes, graph.edge_index.shape[1]
    assert graph.x.dtype == graph.edge_index.dtype == graph.edge_attr.dtype == torch.long
    assert graph.x.shape == (n, f_node) and n > 0
    assert graph.edge_index.shape == (2, e) and graph.edge_attr.shape == (e, f_edge)


def test_vocab_is_zinc_atom_dict():
    assert len(ZINC_ATOM_VOCAB) == 28 and len(set(ZINC_ATOM_VOCAB)) == 28
    assert ZINC_ATOM_VOCAB[:5] == ('C', 'O', 'N', 'F', 'C H1')
    assert ZINC_ATOM_VOCAB[-1] == 'P H1 +' and T['O -'] == 7 and T['N H3 +'] == 10


def test_zinc_ethanol():
    g = ZincFeaturizer()('CCO')
    check_shapes(g, 1, 1)
    assert tokens(g) == ['C', 'C', 'O']
    assert g.x.view(-1).tolist() == [0, 0, 1]
    assert bonds(g) == {(0, 1): 1, (1, 2): 1}
    # edges sorted by (source, target), as PyG's adj.nonzero()
    assert g.edge_index.tolist() == [[0, 1, 1, 2], [1, 0, 2, 1]]
    f = ZincFeaturizer()
    assert f.atom_feature_dims == [28] and f.edge_feature_dims == [4] and f.name == 'zinc'


def test_zinc_benzene_kekulized():
    g = ZincFeaturizer()('c1ccccc1')
    assert tokens(g) == ['C'] * 6
    b = bonds(g)
    ring = [b[(i, i + 1)] for i in range(5)] + [b[(0, 5)]]
    assert sorted(ring) == [1, 1, 1, 2, 2, 2]
    path = [b[(i, i + 1)] for i in range(5)]  # alternating along the ring
    assert all(x != y for x, y in zip(path, path[1:], strict=False))


@pytest.mark.parametrize(
    'smiles, expected',
    [
        ('c1ccncc1', ['C', 'C', 'C', 'N', 'C', 'C']),  # pyridine
        # pyrrole: explicit H on a neutral aromatic N is not written (there is no 'N H1' token)
        ('c1cc[nH]c1', ['C', 'C', 'C', 'N', 'C']),
        ('C[NH3+]', ['C', 'N H3 +']),
        ('CC(=O)[O-]', ['C', 'C', 'O', 'O -']),
        ('C[NH2+]C', ['C', 'N H2 +', 'C']),
        ('c1cc[nH+]cc1', ['C', 'C', 'C', 'N H1 +', 'C', 'C']),  # pyridinium
        ('C[N+](C)(C)C', ['C', 'N +', 'C', 'C', 'C']),
        ('N[C@@H](C)C(=O)O', ['N', 'C H1', 'C', 'C', 'O', 'O']),  # alanine: stereo centre
        ('C=[N+]=[N-]', ['C', 'N +', 'N -']),
        ('CSC(F)(Cl)Br', ['C', 'S', 'C', 'F', 'Cl', 'Br']),
        ('C[NH]C', ['C', 'N', 'C']),  # superfluous bracket H: canonical SMILES fallback
    ],
)
def test_zinc_tokens(smiles, expected):
    assert sorted(tokens(ZincFeaturizer()(smiles))) == sorted(expected)


def test_zinc_tokens_keep_smiles_atom_order():
    assert tokens(ZincFeaturizer()('OCC[NH3+]')) == ['O', 'C', 'C', 'N H3 +']


def test_zinc_triple_bond():
    g = ZincFeaturizer()('CC#N')
    assert bonds(g) == {(0, 1): 1, (1, 2): 3}


@pytest.mark.parametrize('featurizer', [ZincFeaturizer(), OgbFeaturizer()], ids=['zinc', 'ogb'])
def test_single_atom_and_salt(featurizer):
    f_node, f_edge = len(featurizer.atom_feature_dims), len(featurizer.edge_feature_dims)
    g = featurizer('C')
    check_shapes(g, f_node, f_edge)
    assert g.num_nodes == 1 and g.edge_index.shape == (2, 0) and g.edge_attr.shape == (0, f_edge)
    salt = featurizer('C[NH3+].CC(=O)[O-]')  # two fragments
    check_shapes(salt, f_node, f_edge)
    assert salt.num_nodes == 6 and salt.edge_index.shape[1] == 8
    assert featurizer(' \tCCO\n').x.tolist() == featurizer('CCO').x.tolist()


@pytest.mark.parametrize(
    'smiles', ['CCO', 'c1ccccc1', 'C[C@H](N)C(=O)O', 'C/C=C/Cl', 'c1cc[nH]c1',
               'CC(=O)[O-].[Na+]', 'C[Si](C)(C)C', 'O=C1c2ccccc2C(=O)N1CC#N', 'C',
               # OGB's 'misc' buckets and rarer values: dummy atom, radicals, degree 6 /
               # SP3D2, charge +6, isotopes, ring stereo, a metal, OGB's own example
               '*C', '[CH2]C', 'F[S](F)(F)(F)(F)F', '[Fe+6]', '[2H]C([2H])Cl',
               'C[C@@H]1CC[C@H](C)CC1', '[O-][N+](=O)c1ccccc1', '[U]', 'Cl[C@H](/C=C/C)Br',
               'FC(F)=C(F)F', 'c1ccc2[nH]ccc2c1'])
def test_ogb_equals_smiles2graph(smiles):
    ref = smiles2graph(smiles)
    # with descriptors, the atom tables are read by them first (and shared): still OGB's
    for featurizer in (OgbFeaturizer(), OgbFeaturizer(mol_features=['rdkit2d'])):
        g = featurizer(smiles)
        check_shapes(g, 9, 3)
        assert np.array_equal(g.x.numpy(), ref['node_feat'])
        assert np.array_equal(g.edge_index.numpy(), ref['edge_index'])
        assert np.array_equal(g.edge_attr.numpy(), ref['edge_feat'])
        assert g.num_nodes == ref['num_nodes']


def test_ogb_dims():
    from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims

    f = OgbFeaturizer()
    assert f.name == 'ogb'
    assert f.atom_feature_dims == get_atom_feature_dims()
    assert f.edge_feature_dims == get_bond_feature_dims()


BAD = [
    ('', 'empty SMILES'),
    ('   \t\n', 'empty SMILES'),
    (None, 'empty SMILES'),
    (float('nan'), 'empty SMILES'),
    ('garbage', 'invalid SMILES'),
    ('C1CC', 'invalid SMILES'),
    ('C(C)(C)(C)(C)C', 'invalid SMILES'),
    ('c1cccc1', 'invalid SMILES'),
    ('C)', 'invalid SMILES'),
    ('[', 'invalid SMILES'),
    ('.', 'invalid SMILES'),
    ('\x00', 'invalid SMILES'),
    ('☃', 'invalid SMILES'),
    (12, 'expected a SMILES string'),
]


@pytest.mark.parametrize('featurizer', [ZincFeaturizer(), OgbFeaturizer()], ids=['zinc', 'ogb'])
@pytest.mark.parametrize('smiles, reason', BAD)
def test_bad_inputs(featurizer, smiles, reason):
    with pytest.raises(FeaturizationError) as info:
        featurizer(smiles)
    assert str(info.value).startswith(reason)
    assert isinstance(info.value, ValueError)


def test_rdkit_reasons(capfd):
    f = ZincFeaturizer()
    with pytest.raises(FeaturizationError, match='unclosed ring'):
        f('C1CC')
    with pytest.raises(FeaturizationError, match='valence'):
        f('C(C)(C)(C)(C)C')
    with pytest.raises(FeaturizationError, match=r"^invalid SMILES: .{1,160}$"):
        f('x' * 5000)
    assert 'SMILES Parse Error' not in capfd.readouterr().err  # RDKit's log stays silent


@pytest.mark.parametrize('smiles, atom', [('C[Si](C)(C)C', 'Si'), ('C[Se]C', 'Se'),
                                          ('[Na+].[Cl-]', 'Na'), ('[CH2]C', 'C'), ('*C', '*')])
def test_zinc_refuses_atoms_outside_vocab(smiles, atom):
    with pytest.raises(FeaturizationError) as info:
        ZincFeaturizer()(smiles)
    assert re.fullmatch(f"atom '{re.escape(atom)}' \\(token '[^']+'\\) not in the ZINC vocabulary",
                        str(info.value))


def test_zinc_error_message_exact():
    with pytest.raises(FeaturizationError) as info:
        ZincFeaturizer()('C[Si](C)(C)C')
    assert str(info.value) == "atom 'Si' (token 'Si') not in the ZINC vocabulary"


def test_ogb_accepts_other_elements():
    assert OgbFeaturizer()('C[Si](C)(C)C').num_nodes == 5


@pytest.mark.parametrize('featurizer_cls', [ZincFeaturizer, OgbFeaturizer])
def test_max_atoms(featurizer_cls):
    f = featurizer_cls(max_atoms=128)
    assert f('C' * 128).num_nodes == 128
    with pytest.raises(FeaturizationError) as info:
        f('C' * 200)
    assert str(info.value) == 'molecule has 200 atoms; this model supports at most 128'
    assert featurizer_cls()('C' * 200).num_nodes == 200
    for bad in (0, -1, 2.5, True, '12'):
        with pytest.raises(ValueError):
            featurizer_cls(max_atoms=bad)


def test_ogb_guards(monkeypatch):
    def atropisomer(bond):  # RDKit's STEREOATROPCW, which OGB's stereo list lacks
        raise ValueError("'STEREOATROPCW' is not in list")

    monkeypatch.setattr(fz, 'bond_features', atropisomer)
    with pytest.raises(FeaturizationError, match='bond stereo .* not in the OGB vocabulary'):
        OgbFeaturizer()('CC')
    monkeypatch.undo()
    monkeypatch.setattr(fz, 'atom_features', lambda atom: [999] + [0] * 8)
    with pytest.raises(FeaturizationError, match='atom feature outside the ogb vocabulary'):
        OgbFeaturizer()('CC')
    monkeypatch.setattr(fz, 'atom_features', lambda atom: 1 / 0)
    with pytest.raises(FeaturizationError, match='could not featurize'):
        OgbFeaturizer()('CC')


@pytest.mark.parametrize('featurizer', [ZincFeaturizer(max_atoms=64), OgbFeaturizer(),
                                        ZincFeaturizer(vocab=list(reversed(ZINC_ATOM_VOCAB)))])
def test_config_round_trip(featurizer, tmp_path):
    config = featurizer.to_config()
    assert json.loads(json.dumps(config)) == config
    path = tmp_path / 'ckpt.pt'
    torch.save({'featurizer': config, 'w': torch.zeros(2)}, path)
    loaded = torch.load(path, weights_only=True)['featurizer']
    assert loaded == config
    rebuilt = featurizer_from_config(loaded)
    assert type(rebuilt) is type(featurizer) and rebuilt.to_config() == config
    assert rebuilt.max_atoms == featurizer.max_atoms
    for smiles in ('CC(=O)[O-]', 'c1ccccc1'):
        a, b = featurizer(smiles), rebuilt(smiles)
        assert torch.equal(a.x, b.x) and torch.equal(a.edge_attr, b.edge_attr)


def test_config_contents_and_errors():
    config = ZincFeaturizer(max_atoms=128).to_config()
    assert config['name'] == 'zinc' and config['max_atoms'] == 128
    assert config['vocab'] == list(ZINC_ATOM_VOCAB)
    reversed_vocab = ZincFeaturizer(vocab=list(reversed(ZINC_ATOM_VOCAB)))
    assert reversed_vocab('C').x.tolist() == [[27 - T['C']]]
    with pytest.raises(ValueError, match='unknown featurizer'):
        featurizer_from_config({'name': 'nope'})
    with pytest.raises(ValueError, match='bad featurizer config'):
        featurizer_from_config({'name': 'ogb', 'colour': 'red'})
    with pytest.raises(ValueError, match='atom_feature_dims'):
        featurizer_from_config({**OgbFeaturizer().to_config(), 'atom_feature_dims': [1] * 9})
    with pytest.raises(ValueError, match='unknown featurizer'):
        build_featurizer('smiles')
    assert isinstance(build_featurizer('zinc', max_atoms=5), ZincFeaturizer)
    assert build_featurizer('ogb').max_atoms is None


def test_featurize_many():
    graphs, errors = featurize_many(['CCO', '', 'C1CC', 'C[Si](C)(C)C', 'c1ccccc1'],
                                    ZincFeaturizer())
    assert [g is None for g in graphs] == [False, True, True, True, False]
    assert errors[0] is None and errors[4] is None
    assert errors[1] == 'empty SMILES' and errors[2].startswith('invalid SMILES')
    assert errors[3] == "atom 'Si' (token 'Si') not in the ZINC vocabulary"
    assert featurize_many(iter([]), OgbFeaturizer()) == ([], [])


def test_featurize_set_in_workers_is_featurize_many():
    from graphormer_sepnorm.chem.parallel import featurize_set

    smiles = ['CCO', 'not a smiles', 'c1ccccc1O', 'C[N+](C)(C)CC(=O)[O-]', '[Na+].[Cl-]',
              'CC(=O)Nc1ccc(O)cc1', 'C' * 20, '']
    featurizer = OgbFeaturizer(max_atoms=12, mol_features=['rdkit2d', 'morgan'])
    graphs, errors = featurize_set(smiles, featurizer, workers=2)
    expected, expected_errors = featurize_many(smiles, featurizer)
    assert errors == expected_errors and errors[6].startswith('molecule has 20 atoms')
    for got, want in zip(graphs, expected, strict=True):
        assert (got is None) == (want is None)
        if got is not None:
            for key in ('x', 'edge_index', 'edge_attr', 'mol_x'):
                assert torch.equal(got[key], want[key]), key


class _Unrebuildable(OgbFeaturizer):
    def to_config(self):  # what a worker cannot rebuild: its start fails
        return {'name': 'no such featurizer'}


def test_featurize_set_falls_back_to_this_process_when_workers_fail():
    from graphormer_sepnorm.chem.parallel import featurize_set

    with pytest.warns(UserWarning, match='featurization workers could not run'):
        graphs, errors = featurize_set(['CCO', 'C1CC'], _Unrebuildable(), workers=1)
    assert graphs[1] is None and errors[0] is None and errors[1].startswith('invalid SMILES')
    assert torch.equal(graphs[0].x, OgbFeaturizer()('CCO').x)


def test_featurize_set_starts_workers_only_where_they_pay(monkeypatch):
    from graphormer_sepnorm.chem import parallel

    monkeypatch.setattr(parallel.os, 'sched_getaffinity', lambda pid: set(range(8)),
                        raising=False)
    heavy, light = OgbFeaturizer(mol_features=['rdkit2d']), OgbFeaturizer(mol_features=['morgan'])
    large = parallel.MIN_ROWS_FOR_WORKERS
    assert parallel.workers_for(large, heavy) == parallel.MAX_WORKERS
    assert parallel.workers_for(large - 1, heavy) == 0
    assert parallel.workers_for(10 * large, light) == 0
    monkeypatch.setattr(parallel.os, 'sched_getaffinity', lambda pid: {0}, raising=False)
    assert parallel.workers_for(10 * large, heavy) == 0


def _shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        if os.environ.get('CI'):
            pytest.fail(f'{SHARED_DATA} is missing under CI')
        pytest.skip(f'{SHARED_DATA} not present')
    return SHARED_DATA


def test_zinc_subset_test_matches_pyg_processed():
    """Per molecule, atom-type and bond-type multisets equal PyG's processed ZINC subset test."""
    root = _shared_data() / 'ZINC'
    with open(root / 'smiles' / 'subset_test.csv', newline='') as f:
        smiles = [row['smiles'] for row in csv.DictReader(f)]
    raw = (root / 'reference' / 'pyg_subset_processed' / 'test.pt').read_bytes()
    data, slices = torch.load(io.BytesIO(raw), weights_only=False)[:2]  # InMemoryDataset format
    assert len(smiles) == 1000 and len(slices['x']) == 1001
    graphs, errors = featurize_many(smiles, ZincFeaturizer())
    assert errors == [None] * 1000
    edge_attr = data.edge_attr.view(-1)
    for k, g in enumerate(graphs):
        x0, x1 = slices['x'][k], slices['x'][k + 1]
        e0, e1 = slices['edge_index'][k], slices['edge_index'][k + 1]
        assert Counter(g.x.view(-1).tolist()) == Counter(data.x[x0:x1].view(-1).tolist()), k
        assert Counter(g.edge_attr.view(-1).tolist()) == Counter(edge_attr[e0:e1].tolist()), k
        assert g.num_nodes == x1 - x0
