"""Sphinx configuration: offline, warnings as errors (``make docs``), no intersphinx."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

project = "graphormer-sepnorm"
author = "graphormer-sepnorm contributors"
copyright = "the graphormer-sepnorm contributors"
release = "0.1.0"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "myst_parser",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "drafts"]
html_theme = "furo"
html_static_path = ["_static"]
html_title = "graphormer-sepnorm"

myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

# No intersphinx (the build is offline): references into other packages' documentation cannot
# resolve, so they are not checked; every reference into this package and every link between
# pages still must resolve (``-n -W``).
_EXTERNAL = (r"(torch|lightning|pytorch_lightning|numpy|np|pandas|pd|scipy|torch_geometric|"
             r"torchmetrics|jsonargparse|rdkit|ogb|matplotlib|typing_extensions|collections|"
             r"concurrent|multiprocessing|pathlib|argparse|typing|abc|os|io|enum|dataclasses|"
             r"contextlib|logging|subprocess|ctypes|threading|queue|random|types|functools|pickle|importlib|Chem|"
             r"PIL|Image|Axes)"
             r"(\.|$)")
nitpick_ignore_regex = [
    (r"py:.*", _EXTERNAL + r".*"),
    (r"py:class", r"(Tensor|Path|Module|Data|Batch|DataFrame|LightningModule|"
                  r"LightningDataModule|Callback|Trainer|Optimizer|ndarray|Generator|"
                  r"Iterator|Iterable|Sequence|Mapping|Callable|Any|Literal|Self|TypeAlias|"
                  r"ArrayLike|Dataset|DataLoader|Sampler|PathLike|nn\.Module|nn\.Parameter|"
                  r"optional|callable|array-like|file-like)"),
    # The package's Literal type aliases, shown by name in signatures (their values are in the
    # docstrings that take them).
    (r"py:class", r"(EdgeEncoding|NormKind|TrainLength|TrainBatches|Backend|TaskType|Split)"),
]


def _resolve_by_suffix(app, env, node, contnode):
    """Resolve an unqualified ``py`` reference to this package's one object with that name.

    A docstring may write ``GraphormerModule`` or ``graphormer_sepnorm.training.GraphormerModule``
    (the re-export) for ``graphormer_sepnorm.training.module.GraphormerModule``. The reference
    resolves only when exactly one documented object of the package ends with the name; none or
    several leave it unresolved, and ``-n -W`` fails the build.
    """
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip(".~")
    short = target.split(".")[-1]
    prefix = target.rsplit(".", 1)[0] + "." if "." in target else ""
    domain = env.get_domain("py")
    found = [name for name in domain.objects
             if name.startswith("graphormer_sepnorm.") and
             (name.endswith("." + target) or
              (prefix.startswith("graphormer_sepnorm.") and name.startswith(prefix)
               and name.endswith("." + short)))]
    if len(found) != 1:
        return None
    return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], found[0],
                               node, contnode)


def setup(app):
    """Register the suffix resolver."""
    app.connect("missing-reference", _resolve_by_suffix)
