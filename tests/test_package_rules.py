"""Rules of the package's shape that a reader relies on, checked on its source.

- The reference model (``nn/`` outside the device wings ``nn/cpu/`` and ``nn/cuda/``) never
  branches on the device type: speed plugs in through ``set_backend``. Outside ``nn/`` only
  the device plumbing in :data:`PLUMBING` does, none of it changing a result beyond
  floating-point rounding.
- The environment is read for paths and thread counts only; every switch of the computation is
  configuration (saved with the checkpoint).
- No module imports a private name (``_name``) of another package of the package.
- The datamodules read nothing from the Lightning module: what they must agree on reaches them
  through the CLI's links.
"""

import ast
from pathlib import Path

import graphormer_sepnorm

PACKAGE = Path(graphormer_sepnorm.__file__).parent
WINGS = (PACKAGE / "nn" / "cpu", PACKAGE / "nn" / "cuda")
#: Files outside the wings that look at the device, and why (none changes a result beyond
#: floating-point rounding).
PLUMBING = {
    "grid/engine.py": "pins the epoch's host indices before copying them to a GPU",
    "grid/store.py": "compiles the batch gathers on a GPU (eager elsewhere: same values)",
    "prediction/runner.py": "on a CPU, leaves the featurization workers their cores",
    "training/optimization.py": "torch's fused AdamW where the device has it (cpu, cuda)",
}
#: What the package may read from the environment: paths, the compiler, thread counts, and
#: the seed Lightning's ``seed_everything`` hands its callbacks.
ENVIRONMENT = {"GRAPHORMER_SEPNORM_DATA_MIRROR", "GRAPHORMER_SEPNORM_CACHE", "CC", "TMPDIR",
               "OMP_NUM_THREADS", "PL_GLOBAL_SEED"}


def sources(root: Path = PACKAGE) -> list[Path]:
    return sorted(root.rglob("*.py"))


def device_branches(tree: ast.AST) -> list[int]:
    """Lines that compare a ``.type`` attribute or read ``.is_cuda`` (a device branch)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "is_cuda":
            lines.append(node.lineno)
        if isinstance(node, ast.Compare) and any(
                isinstance(side, ast.Attribute) and side.attr == "type"
                for side in (node.left, *node.comparators)):
            lines.append(node.lineno)
    return lines


def environment_names(tree: ast.AST) -> set[str]:
    """The variable names read through ``os.environ`` or ``os.getenv`` (constants resolved)."""
    constants = {target.id: node.value.value for node in ast.walk(tree)
                 if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                 for target in node.targets if isinstance(target, ast.Name)}

    def name(node: ast.AST) -> str:
        if isinstance(node, ast.Constant):
            return node.value
        return constants.get(getattr(node, "id", ""), ast.dump(node))

    def is_environ(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "environ"

    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            if (node.func.attr == "get" and is_environ(node.func.value)) or \
                    node.func.attr == "getenv":
                names.add(name(node.args[0]))
        elif isinstance(node, ast.Subscript) and is_environ(node.value):
            names.add(name(node.slice))
        elif isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
            names.add(name(node.left))
    return names


def test_only_the_wings_and_the_plumbing_branch_on_the_device() -> None:
    found = {}
    for path in sources():
        if not any(wing in path.parents for wing in WINGS):
            lines = device_branches(ast.parse(path.read_text()))
            if lines:
                found[path.relative_to(PACKAGE).as_posix()] = lines
    assert not [name for name in found if name.startswith("nn/")], found
    assert set(found) == set(PLUMBING), f"device branches outside nn/cpu and nn/cuda: {found}"


def test_the_check_sees_a_device_branch() -> None:
    tree = ast.parse("if x.device.type == 'cuda':\n    pass\ny = q.is_cuda\n")
    assert device_branches(tree) == [1, 3]


def test_the_environment_is_read_for_paths_and_threads_only() -> None:
    read = {str(path.relative_to(PACKAGE)): environment_names(ast.parse(path.read_text()))
            for path in sources()}
    assert not {path: names - ENVIRONMENT for path, names in read.items()
                if names - ENVIRONMENT}
    assert set().union(*read.values()) >= {"GRAPHORMER_SEPNORM_DATA_MIRROR", "OMP_NUM_THREADS"}


def test_the_check_sees_every_way_of_reading_the_environment() -> None:
    code = ("import os\nNAME = 'A'\nos.environ.get(NAME)\nos.environ['B']\nos.getenv('C')\n"
            "'D' in os.environ\n")
    assert environment_names(ast.parse(code)) == {"A", "B", "C", "D"}


def private_imports(tree: ast.AST, package: str) -> list[str]:
    """``module._name`` for each private name imported from outside ``package``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "graphormer_sepnorm") and not (node.module + ".").startswith(package + "."):
            found += [f"{node.module}.{a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_private_name_is_imported_across_packages() -> None:
    found = {}
    for path in sources():
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        package = ".".join(parts[:-1])
        names = private_imports(ast.parse(path.read_text()), package)
        if names:
            found[str(path.relative_to(PACKAGE))] = names
    assert not found, found


def test_the_check_sees_a_private_import() -> None:
    code = ("from graphormer_sepnorm.data.collate import _walk, GraphormerCollator\n"
            "from graphormer_sepnorm.grid.store import _own\n")
    assert private_imports(ast.parse(code), "graphormer_sepnorm.grid") == [
        "graphormer_sepnorm.data.collate._walk"]


def test_the_datamodules_read_nothing_from_the_module() -> None:
    for path in sources(PACKAGE / "datasets"):
        text = path.read_text()
        assert "lightning_module" not in text, path


def test_only_the_reader_and_the_converter_load_checkpoints():
    loaders = set()
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr == "load" and getattr(node.func.value, "id", "") == "torch":
                loaders.add(path.relative_to(PACKAGE).as_posix())
    assert loaders == {"checkpoints/__init__.py", "convert.py"}
