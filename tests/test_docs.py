"""The documentation's generated parts are reproducible, the API reference covers the package,
and no page names a file of the repository that does not exist.

The site itself is built by ``make docs`` (warnings as errors), which ``make test`` runs first.
"""

from __future__ import annotations

import importlib.util
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from test_readme import run_python_blocks

from graphormer_sepnorm.predict import predict_smiles

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FIGURES = DOCS / "_static" / "figures"
# Not in the API reference: none (every module of the package has its entry).
UNDOCUMENTED: tuple[str, ...] = ()
#: The pages read for paths: the site's, the README and the benchmarks' index.
PAGES = [*sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts), ROOT / "README.md",
         ROOT / "benchmarks" / "README.md"]
#: Top-level folders of the checkout: a path starting with one names a file that must exist.
REPO_ROOTS = (".ci", "benchmarks", "configs", "docs", "examples", "gpu", "graphormer_sepnorm",
              "notebooks", "results", "tests")
#: What commands write, not files of the checkout: runs, datasets, mirrors, the built site, the
#: GPU bundle, and the experiment grid's results (``results/<name>.csv`` and ``.md``; the
#: paper's table, not run yet).
OUTPUTS = ("runs/", "data/", "mirror/", "lightning_logs/", "docs/_build/", "gpu/bundle/",
           "results/<name>.", "results/paper_table.")
#: Modules named inside the package (``nn/cpu/encoder.py``) are read under graphormer_sepnorm/;
#: other files there are named in full (``data/x.json`` is an output, not ``data/`` of the package).
PACKAGE_FILES = (".py", ".c")
PATH = re.compile(r"(?<![\w./~$-])[\w.][\w.-]*(?:/[\w.*<>-]+)+/?")
ROLE = re.compile(r"\{[\w:-]+\}`[^`]*`|^```\{toctree\}.*?^```", re.S | re.M)


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", header[16:24])


def _subpackages() -> set[str]:
    """The package's folders (``nn``, ``data``, ...), where package-relative paths start."""
    return {p.name for p in (ROOT / "graphormer_sepnorm").iterdir() if p.is_dir()}


def _missing(text: str) -> list[str]:
    """The repository paths ``text`` names that match no file or folder of the checkout.

    Sphinx roles and toctrees (``{doc}`...```) are left to ``make docs -n``; ``<name>`` and
    ``*`` in a path are wildcards that must match something.
    """
    missing = []
    for token in PATH.findall(ROLE.sub("", text)):
        token = token.rstrip(".")
        first = token.split("/")[0]
        if first in _subpackages() and token.endswith(PACKAGE_FILES):
            base = ROOT / "graphormer_sepnorm"
        elif first in REPO_ROOTS and not (token + "/").startswith(OUTPUTS):
            base = ROOT
        else:
            continue
        pattern = re.sub(r"<[^>]*>", "*", token).rstrip("/")
        if not next(base.glob(pattern), None):
            missing.append(token)
    return missing


def test_path_check_flags_missing_files_and_skips_outputs() -> None:
    text = ("`benchmarks/gone.py` and `nn/gone.py`, `nn/cpu/encoder.py` and `configs/<x>.yaml`;"
            " runs/zinc/version_0/last.ckpt data/prepared/molhiv docs/_build/html "
            "results/<name>.md /elsewhere/tests/gone.py {doc}`results/index` "
            "https://example.org/docs/gone.md")
    assert _missing(text) == ["benchmarks/gone.py", "nn/gone.py"]


def test_no_page_names_a_file_that_does_not_exist() -> None:
    missing = [f"{page.relative_to(ROOT)}: {path}" for page in PAGES
               for path in _missing(page.read_text())]
    assert not missing, "pages name files that do not exist:\n" + "\n".join(missing)


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


def test_python_api_tutorial_runs(one_thread) -> None:
    """Every block of the tutorial runs in order, and each gives what the page says."""
    page = run_python_blocks(DOCS / "tutorials" / "python_api.md")
    frame, smiles, batch = page["frame"], page["smiles"], page["batch"]
    assert list(frame.columns) == ["smiles", "penalized_logp", "error"]
    assert list(frame["error"] != "") == [False, False, True]
    again, vectors = predict_smiles(smiles, checkpoint=page["module"], return_embeddings=True)
    assert page["predictions"].shape == (3, 1)
    assert np.allclose(page["predictions"][:, 0].numpy(), again["penalized_logp"], atol=1e-5)
    assert page["embeddings"].shape == (3, 64)
    assert np.allclose(page["embeddings"].numpy(), vectors, atol=1e-5)
    assert torch.allclose(page["similarity"].diagonal(), torch.ones(3))
    attention, last = page["attention"], page["last"]
    assert len(attention) == page["module"].config.num_layers
    weights = page["weights"]
    assert len(weights) == page["paracetamol"].GetNumAtoms() == 11
    assert torch.isclose(weights.sum() + last[2, 0, 0], torch.tensor(1.0), atol=1e-5)
    assert torch.isclose(last[0, 0, :4].sum(), torch.tensor(1.0), atol=1e-5)  # CCO: no padding
    assert torch.isfinite(page["loss"])
    with torch.no_grad():
        assert page["network"].eval()(batch).shape == (3, 2)  # the OGB batch of the last block
