"""The checkpoint reader, and the models shipped inside the package, by name.

Below everything else: training, the commands and prediction all read checkpoints through
:func:`read_checkpoint` (the only ``torch.load`` of a checkpoint in the package, beside the
converter :mod:`graphormer_sepnorm.convert`), and find a bundled model
(``graphormer_sepnorm/checkpoints/<name>.ckpt``) here. This imports nothing of the package.

A checkpoint of the current format carries ``checkpoint[FORMAT_KEY] == FORMAT_VERSION``; every
checkpoint this version writes gets it (:func:`stamp`). The reader upgrades nothing: a file of
an earlier format is refused with an error that names the command converting it once,
``graphormer-sepnorm-convert OLD NEW``.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import torch

__all__ = ["BUNDLED_CHECKPOINTS", "DEFAULT_CHECKPOINT", "FORMAT_KEY", "FORMAT_VERSION",
           "CheckpointError", "bundled_checkpoint_path", "read_checkpoint", "require_current",
           "resolve_checkpoint", "stamp"]

#: The key of a checkpoint's format version (files without it are format 1).
FORMAT_KEY = "graphormer_sepnorm_format"
#: The format version this code reads and writes.
FORMAT_VERSION = 2

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


def read_checkpoint(path: str | Path, map_location: Any = "cpu", mmap: bool = False
                    ) -> dict[str, Any]:
    """A checkpoint of the current format, read with ``torch.load(weights_only=True)``.

    Only tensors and plain values are read: a file that needs arbitrary pickled objects is
    refused and its payload never runs.

    Args:
        path: the file.
        map_location: where tensors are loaded. Default: the CPU.
        mmap: map the file instead of reading its tensors (for a look at the hyperparameters).

    Raises:
        CheckpointError: no such file, unreadable or unsafe, not a dict, or not of the current
            format (the error names ``graphormer-sepnorm-convert``).
    """
    if not Path(path).is_file():
        raise CheckpointError(f"checkpoint file not found: {path}")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(
            f"refusing to load {path}: it needs arbitrary pickled objects, which could run code "
            f"when loaded. Only checkpoints of tensors and plain values are accepted "
            f"(torch.load(weights_only=True) said: {first})") from None
    except (OSError, RuntimeError, EOFError, ValueError) as e:
        raise CheckpointError(f"cannot read checkpoint {path}: {e}") from None
    if not isinstance(payload, dict):
        raise CheckpointError(f"{path} is not a graphormer-sepnorm checkpoint (not a dict)")
    require_current(payload, str(path))
    return payload


def require_current(checkpoint: Mapping[str, Any], source: str | None = None) -> None:
    """Raises unless ``checkpoint`` (read from the file ``source``) is of the current format.

    Raises:
        CheckpointError: an earlier format (convert it with ``graphormer-sepnorm-convert``),
            or a later one (written by a newer graphormer-sepnorm).
    """
    version = checkpoint.get(FORMAT_KEY, 1)
    if version == FORMAT_VERSION:
        return
    name = "the checkpoint" if source is None else source
    if isinstance(version, int) and version > FORMAT_VERSION:
        raise CheckpointError(f"{name} has checkpoint format {version}, from a newer "
                              f"graphormer-sepnorm; this version reads format {FORMAT_VERSION}: "
                              "upgrade the package")
    raise CheckpointError(f"{name} has checkpoint format {version}, from an earlier "
                          f"graphormer-sepnorm; this version reads format {FORMAT_VERSION}. "
                          "Convert it once: graphormer-sepnorm-convert "
                          f"{source or 'OLD.ckpt'} NEW.ckpt")


def stamp(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """Marks ``checkpoint`` (in place) as of the current format; returns it."""
    checkpoint[FORMAT_KEY] = FORMAT_VERSION
    return checkpoint
