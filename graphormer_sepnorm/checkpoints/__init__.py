"""The models shipped inside the package (``graphormer_sepnorm/checkpoints/<name>.ckpt``), by name.

Below everything else: training (``init_from``) and prediction both find a bundled model here,
and this imports nothing of the package.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["BUNDLED_CHECKPOINTS", "DEFAULT_CHECKPOINT", "CheckpointError",
           "bundled_checkpoint_path", "resolve_checkpoint"]

#: Checkpoints shipped inside the package, by name (``graphormer_sepnorm/checkpoints/<name>.ckpt``).
BUNDLED_CHECKPOINTS: dict[str, str] = {
    "molhiv": "molhiv.ckpt",  # ogbg-molhiv, binary: hiv_active_probability
    "zinc": "zinc.ckpt",  # ZINC-subset, regression: penalized_logp
    # the ShareNorm baselines trained with the same data, seed and budget (notebook 02)
    "molhiv_sharenorm": "molhiv_sharenorm.ckpt",
    "zinc_sharenorm": "zinc_sharenorm.ckpt",
    # the start of configs/smiles_csv.yaml: SepNorm pretrained on 174 RDKit descriptors of
    # 239,565 ZINC molecules (configs/pretrain_zinc.yaml); it predicts those descriptors,
    # standardized
    "pretrained": "pretrained.ckpt",
}
DEFAULT_CHECKPOINT = "molhiv"


class CheckpointError(ValueError):
    """A checkpoint that cannot be found, is refused as unsafe, or does not fit this code."""


def bundled_checkpoint_path(name: str) -> Path:
    """Path of the bundled checkpoint ``name``, found with :mod:`importlib.resources`.

    Raises:
        CheckpointError: ``name`` is not a bundled model, or its file is not installed.
    """
    if name not in BUNDLED_CHECKPOINTS:
        raise CheckpointError(f"unknown checkpoint {name!r}: not a file, and not one of the "
                              f"bundled models {sorted(BUNDLED_CHECKPOINTS)}")
    resource = resources.files("graphormer_sepnorm") / "checkpoints" / BUNDLED_CHECKPOINTS[name]
    if not resource.is_file():
        raise CheckpointError(f"bundled checkpoint {name!r} is not installed (expected "
                              f"{resource}); pass a checkpoint file with --checkpoint PATH")
    return Path(str(resource))


def resolve_checkpoint(path_or_name: str | Path) -> Path:
    """An existing file as given, else the bundled checkpoint of that name.

    Raises:
        CheckpointError: Neither an existing file nor an installed bundled model.
    """
    path = Path(path_or_name)
    if path.is_file():
        return path
    text = str(path_or_name)
    if text in BUNDLED_CHECKPOINTS:
        return bundled_checkpoint_path(text)
    if path.suffix or "/" in text or "\\" in text:
        raise CheckpointError(f"checkpoint file not found: {text}")
    return bundled_checkpoint_path(text)
