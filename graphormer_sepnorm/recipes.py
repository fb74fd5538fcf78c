"""The recipes shipped inside the package (``graphormer_sepnorm/configs/``), by name.

A pip install has no checkout: ``graphormer-sepnorm fit --config smiles_csv`` takes the bundled
``smiles_csv.yaml`` when no file of that name exists (``molhiv``, ``zinc``, ``zinc_subset``,
``pretrain_zinc``, and the presets ``cpu_10min``, ``gpu_fast``; ``presets/cpu_10min`` and a
``.yaml`` suffix work too). In a checkout ``configs/`` is the same folder. This imports nothing
of the package.

Examples:
    >>> recipe_path("smiles_csv").name
    'smiles_csv.yaml'
    >>> resolve_configs(["fit", "--config", "cpu_10min"])[2].endswith("presets/cpu_10min.yaml")
    True
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["RECIPES", "recipe_path", "resolve_configs"]

_FOLDER = Path(str(resources.files("graphormer_sepnorm") / "configs"))

#: Bundled recipe names, each with its file inside the package.
RECIPES: dict[str, Path] = {
    **{p.stem: p for p in sorted(_FOLDER.glob("presets/*.yaml"))},
    **{p.stem: p for p in sorted(_FOLDER.glob("*.yaml"))},
}


def recipe_path(name: str) -> Path:
    """The bundled recipe ``name`` (``smiles_csv``, ``presets/cpu_10min``, ``molhiv.yaml``...).

    Raises:
        FileNotFoundError: no such recipe (the message lists them).
    """
    stem = Path(name).name.removesuffix(".yaml").removesuffix(".yml")
    if stem not in RECIPES or len(Path(name).parts) > 2:
        raise FileNotFoundError(f"no config file {name!r}, and no bundled recipe of that name "
                                f"(bundled: {', '.join(sorted(RECIPES))})")
    return RECIPES[stem]


def resolve_configs(args: list[str]) -> list[str]:
    """``args`` with each ``--config X`` naming no file replaced by the bundled recipe ``X``.

    An existing file always wins; a name that is neither a file nor a recipe is left for the
    parser, whose error names it.
    """
    out = list(args)
    for k, arg in enumerate(out):
        if arg == "--config" and k + 1 < len(out):
            k, value = k + 1, out[k + 1]
        elif arg.startswith("--config="):
            value = arg.split("=", 1)[1]
        else:
            continue
        if Path(value).exists() or value.lstrip().startswith(("{", "[")):
            continue
        try:
            path = str(recipe_path(value))
        except FileNotFoundError:
            continue
        out[k] = path if out[k] == value else f"--config={path}"
    return out
