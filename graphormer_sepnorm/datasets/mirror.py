"""Offline mirrors: copy a dataset's raw files from a local, read-only folder, not the internet.

Each data root gets its own copy: the loaders write processed files beside the raw ones.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

MIRROR_ENV = "GRAPHORMER_SEPNORM_DATA_MIRROR"


class DatasetUnavailableError(RuntimeError):
    """Raised when a dataset is neither on disk, nor in a mirror, nor downloadable."""


def resolve_mirror(mirror: str | os.PathLike[str] | None) -> Path | None:
    """The mirror: ``mirror`` if given, else ``$GRAPHORMER_SEPNORM_DATA_MIRROR``, else None."""
    value = os.fspath(mirror) if mirror is not None else os.environ.get(MIRROR_ENV, "")
    return Path(value).expanduser() if value else None


def missing_files(folder: Path, required: Sequence[str]) -> list[str]:
    """The names of ``required`` (paths relative to ``folder``) that do not exist."""
    return [name for name in required if not (folder / name).is_file()]


def copy_from_mirror(mirror: Path, relative: str, dest: Path, required: Sequence[str]) -> None:
    """Copies ``mirror/relative``'s files (no ``processed/``) into ``dest``, skipping those there.

    Args:
        mirror: the mirror folder.
        relative: the dataset's folder inside the mirror, e.g. ``'ZINC/raw'``.
        dest: the dataset's folder in the data root.
        required: files (relative to ``relative``) the mirror must hold.

    Raises:
        DatasetUnavailableError: the mirror lacks a required file, or ``dest`` lies inside it.
    """
    source = (mirror / relative).resolve()
    lacking = missing_files(source, required)
    if lacking:
        raise DatasetUnavailableError(
            f"the data mirror {mirror} lacks {relative}/{lacking[0]} (and {len(lacking) - 1} "
            f"more); it must hold {relative}/ with {', '.join(required)}")
    target = dest.resolve()
    if target == source or source in target.parents:
        raise DatasetUnavailableError(
            f"the data root {dest} lies inside the mirror {mirror}: use another root (the "
            "loaders write processed files beside the raw ones, and a mirror is never written)")
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if not path.is_file() or "processed" in rel.parts:
            continue
        out = target / rel
        if not out.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out)


def unavailable(name: str, dest: Path, relative: str, required: Sequence[str],
                cause: BaseException | None = None) -> DatasetUnavailableError:
    """An error that says how to make ``name`` available without internet."""
    reason = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
    return DatasetUnavailableError(
        f"{name} is not in {dest} and could not be downloaded{reason}. Without internet, point "
        f"--data.mirror (or ${MIRROR_ENV}) at a folder holding {relative}/ with "
        f"{', '.join(required)}; it is copied into the data root, never written.")


def prepare_raw(mirror: str | os.PathLike[str] | None, relative: str, dest: Path,
                required: Sequence[str]) -> bool:
    """Makes the raw files of a dataset present in ``dest`` when a mirror can provide them.

    Returns:
        True when every required file is now in ``dest``; False when they are missing and no
        mirror is set (the caller then tries the official download).
    """
    if not missing_files(dest, required):
        return True
    folder = resolve_mirror(mirror)
    if folder is None:
        return False
    copy_from_mirror(folder, relative, dest, required)
    return True
