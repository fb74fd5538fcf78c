"""The documentation's generated parts are reproducible, and the API reference covers the package.

The site itself is built by ``make docs`` (warnings as errors), which ``make test`` runs first.
"""

from __future__ import annotations

import importlib.util
import re
import struct
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FIGURES = DOCS / "_static" / "figures"
# Not in the API reference: none (every module of the package has its entry).
UNDOCUMENTED: tuple[str, ...] = ()


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", header[16:24])


def test_figures_are_redrawn_from_the_results_files(tmp_path: Path) -> None:
    figures = _load("figures")
    figures.main(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(figures.FIGURES)
    for name in figures.FIGURES:
        committed, drawn = FIGURES / name, tmp_path / name
        assert committed.stat().st_size < 200_000, f"{name} is over 200 KB"
        assert _png_size(drawn) == _png_size(committed), f"{name}: redraw it (docs/figures.py)"
        ratio = drawn.stat().st_size / committed.stat().st_size
        assert 0.85 < ratio < 1.15, f"{name} differs from what docs/figures.py draws: redraw it"


def test_results_pages_embed_every_figure_with_its_source() -> None:
    pages = "\n".join(p.read_text() for p in (DOCS / "results").glob("*.md"))
    for name in _load("figures").FIGURES:
        block = re.search(rf"```{{figure}} /_static/figures/{re.escape(name)}\n(.*?)```", pages,
                          re.S)
        assert block, f"no results page shows {name}"
        assert "docs/figures.py" in block.group(1) and "results/" in block.group(1)


def test_cli_reference_matches_the_installed_commands(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(DOCS / "cli_reference.py"), str(tmp_path)], check=True)
    committed = DOCS / "reference" / "generated"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in
                                                                committed.iterdir())
    for path in tmp_path.iterdir():
        assert path.read_text() == (committed / path.name).read_text(), (
            f"docs/reference/generated/{path.name} is stale: run python docs/cli_reference.py")


def test_api_reference_documents_every_module() -> None:
    documented = set()
    for page in (DOCS / "reference" / "api").glob("*.rst"):
        documented |= set(re.findall(r"^\.\. automodule:: (\S+)$", page.read_text(), re.M))
    package = ROOT / "graphormer_sepnorm"
    modules = set()
    for path in package.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        private = parts[-1].startswith("_") and parts[-1] != "__init__"
        if not private and not name.startswith(UNDOCUMENTED):
            modules.add(name)
    assert modules - documented == set(), "add these modules to docs/reference/api/"
    assert documented - modules == set(), "docs/reference/api/ names modules that are gone"
