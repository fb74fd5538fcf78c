"""The GPU bundle: what a lent GPU machine lacks, made here (``make gpu-bundle``).

The device image has torch, lightning, torch-geometric and torchmetrics but neither
jsonargparse (the CLI's parser) nor RDKit, ogb or the raw datasets, and no network. The bundle,
a git-ignored folder that travels with the working tree (64 MiB for both), holds:

- ``wheels/``: the packages training needs beyond the image (:data:`BUNDLE_PACKAGES`, the
  versions installed here), for Python 3.12 on x86-64, installed there with
  ``pip install --no-index --no-deps --target``;
- ``data/<dataset>/``: prepared splits (:mod:`~graphormer_sepnorm.datasets.prepared`);
- ``MANIFEST.json``: every file's size and SHA-256, and the bundle's and the tree's sizes.

    python -m graphormer_sepnorm.gpu_bundle gpu/bundle --datasets molhiv zinc_subset zinc
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["BUNDLE_PACKAGES", "IMAGE_PACKAGES", "download_wheels", "main", "manifest"]

#: Needed for training and absent from the GPU image (jsonargparse[signatures] for LightningCLI).
BUNDLE_PACKAGES = ("jsonargparse", "docstring-parser", "typeshed-client")
#: The GPU image's Python packages, as the device tool's KINDS.md lists them.
IMAGE_PACKAGES = Path(__file__).resolve().parents[1] / "gpu" / "image_packages.txt"
LIMIT_MIB = 64
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def download_wheels(folder: Path, packages: Sequence[str] = BUNDLE_PACKAGES) -> list[Path]:
    """Downloads ``packages`` (this environment's versions) as wheels for CPython 3.12, x86-64.

    Raises:
        subprocess.CalledProcessError: pip could not (no registry, no such wheel).
    """
    folder.mkdir(parents=True, exist_ok=True)
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in packages]
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
                    *platforms, "-d", str(folder), *pins], check=True)
    return sorted(folder.glob("*.whl"))


def write_datasets(folder: Path, datasets: Sequence[str], root: str) -> None:
    """Prepared splits of ``datasets`` (``molhiv``, ``zinc_subset``, ``zinc``) under ``folder``."""
    from graphormer_sepnorm.datasets import MolHIVDataModule, ZINCDataModule
    from graphormer_sepnorm.datasets.prepared import write_prepared

    for name in datasets:
        module = (MolHIVDataModule(root=root) if name == "molhiv"
                  else ZINCDataModule(subset=name == "zinc_subset", root=root))
        write_prepared(module, folder / name)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tree_bytes(repo: Path) -> int:
    """Bytes of what travels besides carried paths: tracked and untracked-not-ignored files."""
    out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others",
                          "--exclude-standard"], capture_output=True, check=True).stdout
    files = (repo / name for name in out.decode().split("\0") if name)
    return sum(path.stat().st_size for path in files if path.is_file())


def manifest(folder: Path, repo: Path | None = None) -> dict[str, Any]:
    """Every file of the bundle with its bytes and SHA-256; totals; writes ``MANIFEST.json``."""
    files = {str(p.relative_to(folder)): {"bytes": p.stat().st_size, "sha256": _sha256(p)}
             for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "MANIFEST.json"}
    total = sum(f["bytes"] for f in files.values())
    info: dict[str, Any] = {"files": files, "bundle_bytes": total}
    if repo is not None:
        info["tree_bytes"] = tree_bytes(repo)
        info["with_tree_mib"] = round((total + info["tree_bytes"]) / 2**20, 2)
        info["fits"] = info["with_tree_mib"] < LIMIT_MIB
    (folder / "MANIFEST.json").write_text(json.dumps(info, indent=1))
    return info


def main(argv: list[str] | None = None) -> int:
    """Makes the bundle and prints its size with the tree's; status 1 if over 64 MiB."""
    p = argparse.ArgumentParser(description="Writes the GPU bundle (see the module docstring).")
    p.add_argument("folder", type=Path, nargs="?", default=Path("gpu/bundle"))
    p.add_argument("--datasets", nargs="*", default=["molhiv", "zinc_subset", "zinc"])
    p.add_argument("--root", default="data", help="the datamodules' data root")
    args = p.parse_args(argv)
    download_wheels(args.folder / "wheels")
    write_datasets(args.folder / "data", args.datasets, args.root)
    repo = Path(__file__).resolve().parents[1]
    info = manifest(args.folder, repo)
    for name, meta in info["files"].items():
        print(f"{meta['bytes'] / 2**20:8.2f} MiB  {name}")
    verdict = "fits" if info["fits"] else "TOO BIG"
    print(f"gpu-bundle: {info['bundle_bytes'] / 2**20:.1f} MiB, with the working tree "
          f"{info['with_tree_mib']:.1f} MiB of {LIMIT_MIB} ({verdict})")
    return 0 if info["fits"] else 1


if __name__ == "__main__":
    sys.exit(main())
