"""No private RDKit name or attribute in the package: RDKit's public API only.

A private name (``rdMolDescriptors._CalcCrippenContribs``) or an attribute RDKit caches on a
molecule (``mol._adjMat``) can change or vanish in any RDKit release, and the features would
then be wrong or crash far from the cause. The check reads each module's syntax tree:

- an import of a private name or module from ``rdkit``;
- a private attribute (``_x``, dunders allowed) reached from a name bound to an ``rdkit``
  import (``Descriptors._ChargeDescriptors``);
- in a module that imports ``rdkit``, a private attribute of anything but ``self``, ``cls``,
  ``super()`` or this package's own modules (``mol._eStateIndices``, read or written), or one
  named by a string to ``getattr``, ``hasattr``, ``setattr`` or ``delattr``.
"""

import ast
from pathlib import Path

import pytest

import graphormer_sepnorm

PACKAGE = Path(graphormer_sepnorm.__file__).parent
BENCHMARKS = Path(__file__).parents[1] / "benchmarks"
OWN = "graphormer_sepnorm"


#: Public despite the underscore: a named tuple's methods and fields (``GraphArrays._replace``).
NAMED_TUPLE = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}


def _private(name: str) -> bool:
    return (name.startswith("_") and not (name.startswith("__") and name.endswith("__"))
            and name not in NAMED_TUPLE)


def _bound(tree: ast.AST) -> dict[str, str]:
    """Each name an import binds, and the module (or module.name) it comes from."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _root(node: ast.AST) -> ast.AST:
    """What an attribute chain starts from: ``mol`` of ``mol.GetAtoms()[0]._x``."""
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Call):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def private_rdkit_uses(source: str) -> list[str]:
    """``line: text`` of each private RDKit name or attribute ``source`` uses."""
    tree = ast.parse(source)
    bound = _bound(tree)
    rdkit = {name for name, origin in bound.items() if origin.split(".")[0] == "rdkit"}
    own = {name for name, origin in bound.items() if origin.split(".")[0] == OWN}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [
                f"{node.module}.{a.name}" for a in node.names]
            if getattr(node, "level", 0) == 0 and any(
                    m.split(".")[0] == "rdkit" and any(map(_private, m.split(".")))
                    for m in modules):
                found.append(node)
        elif isinstance(node, ast.Attribute) and _private(node.attr) and rdkit:
            root = _root(node)
            if isinstance(root, ast.Name) and root.id in rdkit:
                found.append(node)
            elif not (isinstance(root, ast.Name) and root.id in {"self", "cls", "super", *own}):
                found.append(node)
        elif (isinstance(node, ast.Call) and rdkit and isinstance(node.func, ast.Name)
              and node.func.id in {"getattr", "hasattr", "setattr", "delattr"}
              and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and _private(node.args[1].value)):
            found.append(node)
    return [f"{node.lineno}: {ast.get_source_segment(source, node)}" for node in found]


@pytest.mark.parametrize("folder", [PACKAGE, BENCHMARKS], ids=["package", "benchmarks"])
def test_no_private_rdkit_name_or_attribute(folder):
    uses = {str(path.relative_to(folder.parent)): private_rdkit_uses(path.read_text())
            for path in sorted(folder.rglob("*.py"))}
    assert {path: found for path, found in uses.items() if found} == {}


CAUGHT = [
    "from rdkit.Chem import rdMolDescriptors\nrdMolDescriptors._CalcCrippenContribs(mol)",
    "from rdkit.Chem import Descriptors\nlow, high = Descriptors._ChargeDescriptors(mol)",
    "from rdkit.Chem import GraphDescriptors as G\nG._CalculateEntropies(c, t, n)",
    "from rdkit import Chem\nd = mol._adjMat",
    "from rdkit import Chem\nmol._balabanMat = Chem.GetDistanceMatrix(mol)",
    "from rdkit import Chem\nmols[0]._eStateIndices = []",
    "from rdkit import Chem\nif not hasattr(mol, '_chargeDescriptors'): pass",
    "from rdkit import Chem\nsetattr(mol, '_graphormerTables', t)",
    "from rdkit.Chem.Descriptors import _ChargeDescriptors",
    "import rdkit.Chem._private as p",
    "import rdkit\nrdkit.Chem.rdMolDescriptors._CalcCrippenContribs(m)",
    "from rdkit import Chem\nn = Chem.MolFromSmiles(s).GetAtomWithIdx(0)._cache",
]
PUBLIC = [
    "from rdkit import Chem\nclass F:\n    def f(self):\n        return self._cache",
    "import rdkit\nv = rdkit.__version__",
    "from rdkit.Chem import Descriptors\nd = dict(Descriptors.descList)",
    "from rdkit import Chem\nclass M(Base):\n    def f(self):\n        super()._apply(1)",
    "from rdkit import Chem\nfrom graphormer_sepnorm.chem import layout\nlayout._x",
    "import torch\nk = torch.ops.aten._softmax_backward_data",  # no RDKit in the module
    "from rdkit import Chem\natom.GetDoubleProp('_GasteigerCharge')",  # an RDKit property
    "from rdkit import Chem\ngraph = self._featurize(mol)._replace(mol_x=None)",
]


@pytest.mark.parametrize("source", CAUGHT)
def test_the_check_catches_private_uses(source):
    assert len(private_rdkit_uses(source)) == 1, source


@pytest.mark.parametrize("source", PUBLIC)
def test_the_check_passes_public_uses(source):
    assert private_rdkit_uses(source) == []
