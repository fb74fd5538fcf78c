"""The descriptor shortcuts give RDKit's own values, to the last bit, on odd molecules."""

import functools
import math

import numpy as np
import pytest
from rdkit import Chem, RDLogger
from rdkit.Chem import QED, Descriptors, Fragments, Graphs, SpacialScore
from rdkit_values import assert_rdkits

from graphormer_sepnorm.chem import graph_shortcuts as graph
from graphormer_sepnorm.chem import mol_features as mf
from graphormer_sepnorm.chem import rdkit_shortcuts as shortcuts
from graphormer_sepnorm.chem.substructure_screen import PatternScreen, pattern_clauses

RDLogger.DisableLog("rdApp.*")

# charged atoms, explicit and isotopic H, stereo (atoms, bonds), rings (fused, spiro, bridged,
# macro), salts and fragments, metals, dummy atoms, one atom, radicals, odd valences
SMILES = [
    "CC(=O)Nc1ccc(O)cc1", "C[N+](C)(C)CC(=O)[O-]", "[2H]C([2H])([2H])c1ccccc1", "[H]OC([H])=O",
    "O=[N+]([O-])c1ccc2[nH]c3ccccc3c2c1", "C1CC2CCC1CC2", "N#CC(=O)Cl", "[Na+].[Cl-]",
    "OC1=C(O)C=C2C(=C1)OC3=CC(=O)C(=CC3=C2C4=CC=CC=C4)O", "C/C=C/C(=O)O", "F/C=C\\F",
    "C[C@H](N)C(=O)O", "C[C@@H]1CC[C@H](C)CC1", "C1CCC2(CC1)CCCC2", "C1CCCCCCCCCCC1",
    "CC(C)(C)c1ccc(S(=O)(=O)N)cc1", "[O-][n+]1ccccc1", "c1ccc2c(c1)ccc1ccccc12", "C#CC#N",
    "OS(=O)(=O)C(F)(F)F", "C[Si](C)(C)Cl", "[Fe+2].[O-]C(=O)C", "*c1ccccc1", "C", "[CH3]",
    "CCN=C=O", "N=[N+]=[N-]", "O=P(O)(O)OCC", "ClC(Cl)(Cl)Br", "c1ccsc1-c1ncco1", "[13CH4]",
    "CSSC", "OO", "C=CC=CC=O", "O=C1NC(=O)C(=O)N1", "c1cc[nH]c1", "Cn1cnc2c1c(=O)n(C)c(=O)n2C",
    "C1=CC=CC=C1.C1=CC=CC=C1", "OCC(O)CO", "[NH4+]", "[OH-]", "S", "[Se]", "B(O)(O)c1ccccc1",
]
SMILES.append("CC.[Na]")  # a one-atom second fragment (RDKit's BertzCT notes it)


def _mols(smiles):
    mol = Chem.MolFromSmiles(smiles)
    return [mol, Chem.AddHs(mol)]


@pytest.mark.parametrize("name, ours", [
    ("SPS", graph.spacial_score), ("BertzCT", graph.bertz_ct), ("BalabanJ", graph.balaban_j),
    ("Chi0", graph.chi0), ("Chi1", graph.chi1),
    ("NumValenceElectrons", graph.num_valence_electrons), ("AvgIpc", graph.avg_ipc)])
def test_graph_shortcuts_are_rdkits_functions(name, ours):
    theirs = dict(Descriptors.descList)[name]
    for smiles in SMILES:
        for mol in _mols(smiles):
            expected, got = _value(theirs, mol), _value(ours, mol)
            assert _bits(got) == _bits(expected), (smiles, got, expected)


def _value(function, mol):
    try:
        return float(function(Chem.Mol(mol)))
    except Exception:  # RDKit raises on some molecules: ours must too
        return "raised"


def _bits(value):
    return value if isinstance(value, str) else np.float64(value).tobytes()


def test_spacial_score_on_one_shared_molecule_with_stereo_bonds():
    mol = Chem.MolFromSmiles("C/C=C/[C@H](F)C1CC1C=CC")
    tables_first = Chem.Mol(mol)
    graph.mol_tables(tables_first)  # the cached tables do not change the value
    assert graph.spacial_score(tables_first) == SpacialScore.SPS(mol)


def test_estate_indices_are_rdkits():
    from rdkit.Chem.EState.EState import EStateIndices

    for smiles in SMILES:
        for mol in _mols(smiles):
            expected = EStateIndices(Chem.Mol(mol), force=True)
            np.testing.assert_array_equal(shortcuts.estate_indices(Chem.Mol(mol)), expected)


def test_screened_fragments_and_qed_are_rdkits():
    fragments = [(name, f) for name, f in Fragments.fns]
    for smiles in SMILES:
        for mol in _mols(smiles):
            for name, function in fragments:
                expected = function(Chem.Mol(mol))
                assert shortcuts.ScreenedFragment(function)(Chem.Mol(mol)) == expected, name
            reused = [mf._safe(dict(Descriptors.descList)[n], mol) for n in shortcuts.QED_REUSED]
            ours = _value(functools.partial(shortcuts.qed_from_descriptors, reused=reused), mol)
            assert _bits(ours) == _bits(_value(QED.qed, mol)), smiles


def test_screen_never_rules_out_a_pattern_that_matches():
    screen = PatternScreen(shortcuts.SCREENED)
    ruled_out = 0
    for smiles in SMILES:
        for mol in _mols(smiles):
            possible = screen(mol)
            matches = [mol.HasSubstructMatch(p) for p in shortcuts.SCREENED]
            assert not any(m and not p for m, p in zip(matches, possible, strict=True)), smiles
            ruled_out += int((~possible).sum())
    assert ruled_out > len(SMILES) * len(shortcuts.SCREENED) / 2  # and it rules out many


@pytest.mark.parametrize("smarts, needs", [
    ("C=O", {frozenset({6}), frozenset({8})}),  # aliphatic C and O (+ their double bond)
    # charged atoms by (type, charge) keys, the uncharged O by its type
    ("[N+](=O)[O-]", {frozenset({10_000 + 7 * 64 + 33}), frozenset({8}),
                      frozenset({10_000 + 8 * 64 + 31})}),
    ("[!#6]", set()), ("[$(C=O),$(C=S)]", {frozenset({6}), frozenset({8, 16})}),
    ("[!$(C=O)]", set())])
def test_pattern_clauses_by_hand(smarts, needs):
    _, clauses = pattern_clauses(Chem.MolFromSmarts(smarts))
    atom_clauses = {c for c in clauses if all(k < 1 << 30 for k in c)}
    assert atom_clauses == needs


def test_rdkit2d_uses_the_shortcuts_and_gives_rdkits_raw_values():
    features, functions = mf.RDKit2D(), dict(Descriptors.descList)
    names = [item["name"] for item in features.spec]
    assert features.functions[names.index("SPS")] is graph.spacial_score
    assert isinstance(features.functions[names.index("fr_ester")], shortcuts.ScreenedFragment)
    for smiles in SMILES:
        for mol in _mols(smiles):
            expected = np.array([mf._safe(functions[n], Chem.Mol(mol)) for n in names])
            got = features.raw(Chem.Mol(mol))
            assert_rdkits(got, expected, names, smiles)
            assert not math.isnan(got[names.index("MolWt")])


def test_characteristic_polynomial_is_rdkits_bit_for_bit():
    negative = 0  # RDKit's own subtraction runs after a negative coefficient (a -0.0 off it)
    for smiles in SMILES:
        for mol in _mols(smiles):
            adjacency = np.equal(Chem.GetDistanceMatrix(mol, False), 1)
            expected = Graphs.CharacteristicPolynomial(mol, adjacency)
            got = graph.characteristic_polynomial(adjacency)
            assert got.tobytes() == expected.tobytes(), smiles
            negative += int((expected[1:] > 0).any())  # c_n = -res[n] < 0 somewhere
    assert negative > 0


def test_vector_columns_are_rdkits_functions():
    functions = dict(Descriptors.descList)
    names = [name for name in functions if shortcuts.VectorColumn.applies(name)]
    # PEOE, SMR, SlogP, EState_VSA, VSA_EState, BCUT2D
    assert len(names) == 14 + 10 + 12 + 11 + 10 + 8
    for smiles in SMILES:
        for mol in _mols(smiles):
            shared = Chem.Mol(mol)  # one molecule for all columns, as RDKit2D calls them
            for name in names:
                # RDKit's BCUT2D columns are NaN where its vector raises; each of ours raises
                expected = _value(functions[name], mol)
                got = _value(shortcuts.VectorColumn(name), shared)
                assert_rdkits([_nan_if_raised(got)], [expected], [name], smiles)  # BCUT2D: close
                assert _bits(_value(shortcuts.VectorColumn(name), mol)) == _bits(got), name
    with pytest.raises(ValueError, match="not an entry"):
        shortcuts.VectorColumn("PEOE_VSA")


def _nan_if_raised(value):
    return math.nan if value == "raised" else value


def test_bcut2d_is_rdkits_with_shared_crippen_contributions():
    from rdkit.Chem import MolSurf, rdMolDescriptors
    shortcut_taken = 0
    for smiles in SMILES:
        for mol in _mols(smiles):
            try:
                expected = list(rdMolDescriptors.BCUT2D(Chem.Mol(mol)))
            except Exception:
                expected = "raised"
            hydrogens = any(atom.GetAtomicNum() == 1 for atom in mol.GetAtoms())
            for cached in (False, True):  # the contributions computed here, or by SMR_VSA first
                copy = Chem.Mol(mol)
                if cached:
                    MolSurf.SMR_VSA_(copy)
                try:
                    got = shortcuts.bcut2d(copy)
                except Exception:
                    got = "raised"
                if "raised" in (got, expected) or hydrogens:  # RDKit's own: to the last bit
                    assert got == expected, (smiles, cached)
                else:  # numpy's eigensolver on the same matrices
                    assert_rdkits(got, expected, shortcuts.BCUT2D_NAMES, (smiles, cached))
            shortcut_taken += int(mol.GetNumAtoms() > 0 and not hydrogens)
    assert shortcut_taken > len(SMILES) - 3  # the molecules as parsed (AddHs's take RDKit's)


def test_bcut2d_by_hand_and_with_properties_that_are_not_finite(monkeypatch):
    from rdkit.Chem import rdMolDescriptors

    from graphormer_sepnorm.chem import bcut_shortcut

    # ethene: masses 12.011 on the diagonal, 1/sqrt(2) between them: 12.011 +- 0.7071...
    high, low = shortcuts.bcut2d(Chem.MolFromSmiles("C=C"))[:2]
    assert (high, low) == pytest.approx((12.011 + 0.5 ** 0.5, 12.011 - 0.5 ** 0.5), rel=1e-14)
    mol = Chem.MolFromSmiles("CCO")
    monkeypatch.setattr(bcut_shortcut.rdMolDescriptors, "_CalcCrippenContribs",
                        lambda m: [(math.nan, 1.0)] * m.GetNumAtoms())
    got = shortcuts.bcut2d(mol)  # RDKit's solver, on the properties as they are
    masses = [a.GetMass() for a in mol.GetAtoms()]
    assert got[:2] == list(rdMolDescriptors.BCUT2D(mol, masses))
    assert _bits(got[4]) == _bits(rdMolDescriptors.BCUT2D(mol, [math.nan] * 3)[0])
    assert got[6:] == list(rdMolDescriptors.BCUT2D(mol, [1.0] * 3))


def test_charge_descriptors_are_rdkits():
    functions = dict(Descriptors.descList)
    for smiles in SMILES:
        for mol in _mols(smiles):
            expected = Descriptors._ChargeDescriptors(Chem.Mol(mol), force=True)
            got = shortcuts.charge_extremes(Chem.Mol(mol))
            assert [_bits(v) for v in got] == [_bits(v) for v in expected], smiles
            shared = Chem.Mol(mol)
            for name in sorted(shortcuts.CHARGE_DESCRIPTORS):
                ours = shortcuts.ChargeDescriptor(functions[name])
                assert _bits(_value(ours, shared)) == _bits(_value(functions[name], mol)), name


# hydrogens on oxygen in each of Crippen's cases (alcohols, phenols, acids, enols, oximes,
# peroxides, sulfenic and boronic acids, cyanic acid, water, charged and aromatic oxygens) and on
# other atoms (thiols, phosphines, silanes, aromatic N-H, selenium)
CRIPPEN_SMILES = [
    "CO", "Oc1ccccc1", "OC(=O)C", "OC=C", "CC=NO", "OO", "SO", "OB(O)c1ccccc1", "OC#N", "O",
    "[OH-]", "[OH3+]", "C[OH+]C", "C=[OH+]", "On1ccccc1=O", "Oc1ncccc1", "O[n+]1ccccc1",
    "OS(=O)(=O)O", "OP(=O)(O)O", "O[Si](C)(C)C", "ON=O", "OC(=S)C", "OC(=N)C", "OCl", "CS",
    "CP", "C[SiH3]", "c1cc[nH]c1", "[SeH2]", "C[NH3+]", "OC=[O+]C", "Oc1ccco1", "Oc1cccs1",
]


def test_crippen_descriptors_are_rdkits_bit_for_bit():
    from rdkit.Chem import Crippen, rdMolDescriptors

    from graphormer_sepnorm.chem import crippen_shortcut as crippen
    shortcut_taken = 0
    for smiles in SMILES + CRIPPEN_SMILES:
        for mol in _mols(smiles):
            for function, ours in [(Crippen.MolLogP, crippen.mol_logp),
                                   (Crippen.MolMR, crippen.mol_mr)]:
                assert _bits(_value(ours, mol)) == _bits(_value(function, mol)), smiles
            shortcut_taken += crippen._hydrogen_labels(mol) is not None
            shared = Chem.Mol(mol)  # the contributions cached by an earlier descriptor
            rdMolDescriptors._CalcCrippenContribs(shared)
            got = crippen.crippen_descriptors(shared)
            expected = rdMolDescriptors.CalcCrippenDescriptors(Chem.Mol(mol))
            assert [_bits(v) for v in got] == [_bits(v) for v in expected], smiles
    assert shortcut_taken > len(SMILES)  # most as parsed, and AddHs's without hydrogens


def test_hydrogen_types_by_hand():
    from graphormer_sepnorm.chem.crippen_shortcut import hydrogen_type

    def on(smiles, index):
        return hydrogen_type(Chem.MolFromSmiles(smiles).GetAtomWithIdx(index))

    assert [on("CO", 0), on("CO", 1), on("N", 0), on("OC=O", 0), on("OC#N", 0)] == [
        "H1", "H2", "H3", "H4", "HS"]
    assert [on("Oc1ccccc1", 0), on("ON=C", 0), on("OO", 0), on("CS", 1)] == [
        "H2", "H3", "H4", "H2"]
    assert on("Oc1ncccc1", 0) == "H2" and on("O[n+]1ccccc1", 0) is None  # on c; on n: RDKit's
    assert on("O", 0) is None and on("[OH-]", 0) is None and on("c1cc[nH]c1", 3) == "H3"


def test_crippen_takes_rdkits_path_where_rdkit_types_the_reference_hydrogens_otherwise(
        monkeypatch):
    from rdkit.Chem import Crippen

    from graphormer_sepnorm.chem import crippen_shortcut as crippen
    monkeypatch.setattr(crippen, "_REFERENCES", {**crippen._REFERENCES, "H1": ("N", 0)})
    crippen._hydrogen_contributions.cache_clear()
    try:
        assert crippen._hydrogen_contributions() is None
        mol = Chem.MolFromSmiles("CCO")
        assert _bits(crippen.mol_logp(mol)) == _bits(Crippen.MolLogP(Chem.Mol(mol)))
    finally:
        crippen._hydrogen_contributions.cache_clear()
