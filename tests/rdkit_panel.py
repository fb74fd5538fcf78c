"""A fixed panel of odd molecules and RDKit's own descriptor values for them, recorded.

``rdkit_panel.json`` holds, for each SMILES of :data:`PANEL` and each descriptor of the
``rdkit2d`` spec, the value of RDKit's own function (``Descriptors.descList``) on a freshly
parsed molecule (``null`` where it raises or is not finite), and the RDKit version that gave
them. ``tests/test_rdkit_descriptors.py`` checks the installed RDKit against them. To record
them again (only on purpose: a new RDKit that moves a value changes the features models were
fitted on)::

    .venv/bin/python tests/rdkit_panel.py
"""

import json
import math
from pathlib import Path

from rdkit import Chem, rdBase
from rdkit.Chem import Descriptors

RECORDED = Path(__file__).with_name("rdkit_panel.json")

#: Salts, charges, metals, macrocycles, lone atoms and other odd molecules.
PANEL = [
    "CC(=O)Nc1ccc(O)cc1",  # paracetamol
    "[Na+].[Cl-]",  # a salt of two ions
    "CC(=O)[O-].[Na+]",  # an organic salt
    "C[N+](C)(C)CC(=O)[O-]",  # a zwitterion
    "O=[N+]([O-])c1ccc2[nH]c3ccccc3c2c1",  # a nitro group on a fused aromatic
    "[NH3]->[Pt](<-[NH3])(Cl)Cl",  # cisplatin, dative bonds to a metal
    "[cH-]1cccc1.[cH-]1cccc1.[Fe+2]",  # ferrocene as ions
    "O=[Mn](=O)(=O)[O-].[K+]",  # potassium permanganate
    "CC(C)(C)[Si](C)(C)OC",  # silicon
    "C1CCCCCCCCCCC1",  # cyclododecane, a plain macrocycle
    "CC1CCCCCCCCCCC(=O)O1",  # a 14-membered macrolactone
    "c1cc2cc3ccc(cc4ccc(cc5ccc(cc1n2)[nH]5)n4)[nH]3",  # porphine, an aromatic macrocycle
    "C",  # methane: one heavy atom
    "[Na+]",  # a lone ion
    "[He]",  # a lone noble-gas atom
    "[H]",  # a lone hydrogen atom
    "[CH3]",  # a radical
    "[2H]C([2H])([2H])c1ccccc1",  # isotopes, kept as atoms
    "N[C@@H](C)C(=O)O",  # a stereocentre
    "C/C=C/C(=O)Cl",  # a stereo double bond, an acyl chloride
    "C1CC2CCC1CC2",  # a bridged bicycle
    "OC1=C(O)C=C2C(=C1)OC3=CC(=O)C(=CC3=C2C4=CC=CC=C4)O",  # a dye, written Kekulé
    "CC(C)Cc1ccc(cc1)[C@@H](C)C(=O)O",  # ibuprofen
    "O=S(=O)(O)c1ccc(N=Nc2ccc(N(C)C)cc2)cc1",  # an azo dye with a sulfonic acid
]


def spec_names() -> list[str]:
    """The descriptors of the ``rdkit2d`` spec, in order (read without the package)."""
    spec = Path(__file__).parents[1] / "graphormer_sepnorm/chem/rdkit2d_descriptors.json"
    return [item["name"] for item in json.loads(spec.read_text())["descriptors"]]


def rdkit_value(name: str, smiles: str) -> float | None:
    """RDKit's own ``name`` of a freshly parsed ``smiles``; ``None`` where it has none."""
    try:
        value = float(dict(Descriptors.descList)[name](Chem.MolFromSmiles(smiles)))
    except Exception:  # RDKit raises assorted types on odd molecules
        return None
    return value if math.isfinite(value) else None


def record() -> dict:
    """The panel's values from the installed RDKit, as ``rdkit_panel.json`` holds them."""
    names = spec_names()
    return {"rdkit": rdBase.rdkitVersion, "descriptors": names,
            "values": {smiles: [rdkit_value(name, smiles) for name in names]
                       for smiles in PANEL}}


def dumps(recorded: dict) -> str:
    """``recorded`` as JSON, one line a molecule (values exact: Python's shortest repr)."""
    rows = [f"  {json.dumps(smiles)}: {json.dumps(values)}"
            for smiles, values in recorded["values"].items()]
    return (f'{{"rdkit": {json.dumps(recorded["rdkit"])},\n'
            f' "descriptors": {json.dumps(recorded["descriptors"])},\n'
            ' "values": {\n' + ",\n".join(rows) + "\n}}\n")


if __name__ == "__main__":
    RECORDED.write_text(dumps(record()))
    print(f"{RECORDED}: {len(PANEL)} molecules x {len(spec_names())} descriptors")
