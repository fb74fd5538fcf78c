"""The installed RDKit gives the descriptors the models were fitted on.

The ``rdkit2d`` features are RDKit's own functions: an RDKit that lacks one of the spec's
descriptors, or computes another value for the panel of odd molecules recorded in
``rdkit_panel.json`` (``rdkit_panel.py``), fails here, not silently in a user's predictions.
"""

import json
import math

import numpy as np
import pytest
from rdkit import Chem
from rdkit.Chem import Descriptors
from rdkit_panel import PANEL, RECORDED, record, spec_names

from graphormer_sepnorm.chem import mol_features as mf

#: How far a recorded value may move: RDKit's own functions give the recorded values to the
#: last bit on the machine that recorded them; another platform's floating point (an
#: eigensolver's, a sum's) moves the last digits, a changed definition far more.
RTOL, ATOL = 1e-9, 1e-12


def test_installed_rdkit_has_every_descriptor_of_the_spec():
    available = dict(Descriptors.descList)
    assert [name for name in spec_names() if name not in available] == []
    assert spec_names() == [item["name"] for item in mf.descriptor_spec()]


def test_a_missing_descriptor_names_itself(monkeypatch):
    monkeypatch.setattr(Descriptors, "descList",
                        [item for item in Descriptors.descList if item[0] != "BertzCT"])
    with pytest.raises(RuntimeError, match=r"lacks the descriptors \['BertzCT'\]"):
        mf.RDKit2D()


def test_the_panel_is_recorded_for_the_spec():
    recorded = json.loads(RECORDED.read_text())
    assert recorded["descriptors"] == spec_names()
    assert list(recorded["values"]) == PANEL


@pytest.mark.parametrize("smiles", PANEL)
def test_installed_rdkit_gives_the_recorded_values(smiles):
    recorded = json.loads(RECORDED.read_text())
    expected = np.array([math.nan if v is None else v for v in recorded["values"][smiles]])
    got = mf.RDKit2D().raw(Chem.MolFromSmiles(smiles))
    close = np.isclose(got, expected, rtol=RTOL, atol=ATOL, equal_nan=True)
    moved = {name: (g, e) for name, g, e, ok in
             zip(recorded["descriptors"], got, expected, close, strict=True) if not ok}
    assert moved == {}, f"RDKit moved these values of {smiles!r} (got, recorded): {moved}"


def test_the_recording_is_rdkits_own_functions():
    # what rdkit_panel.py writes is what the installed RDKit's functions give, one by one
    recorded = json.loads(RECORDED.read_text())
    fresh = record()
    for smiles in PANEL[:6]:
        assert np.allclose(np.array(fresh["values"][smiles], dtype=float),
                           np.array(recorded["values"][smiles], dtype=float),
                           rtol=RTOL, atol=ATOL, equal_nan=True), smiles
