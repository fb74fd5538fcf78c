"""Builds the package's C kernels at first use, with the system C compiler, and loads them.

The kernels are plain C with AVX2 intrinsics and no Python or torch headers, so a build takes
about a second and needs only ``cc`` (gcc or clang): no ninja, no wheel per platform. Each
build is cached under ``$GRAPHORMER_SEPNORM_CACHE`` (default
``~/.cache/graphormer_sepnorm``), named by a hash of the source, the flags and the compiler,
and written through a temporary file, so processes starting together (DDP) do not clash.

Where the CPU lacks AVX2, no compiler is found or a build fails, :func:`load` warns once and
the callers compute the same function in plain torch (dropout draws differ).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import warnings
from functools import cache
from pathlib import Path

import torch

FLAGS = ("-O3", "-mavx2", "-mfma", "-fPIC", "-shared", "-fno-math-errno")
"""Compiler flags; no ``-ffast-math``, which would drop the ``-inf`` of masked keys."""


def cache_dir() -> Path:
    """Where built libraries are kept."""
    default = Path.home() / ".cache" / "graphormer_sepnorm"
    return Path(os.environ.get("GRAPHORMER_SEPNORM_CACHE", default)) / "native"


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def _why_unavailable() -> str | None:
    """Why no kernel can be built here, or ``None`` when one can."""
    capability = torch.backends.cpu.get_cpu_capability()
    if capability not in ("AVX2", "AVX512"):
        return f"the CPU lacks AVX2 (torch reports {capability})"
    if _compiler() is None:
        return "no C compiler (cc) found"
    return None


def _compile(source: Path, defines: dict[str, int]) -> Path:
    """The shared library for ``source`` with ``defines``, built unless cached."""
    compiler = _compiler()
    assert compiler is not None
    args = [*FLAGS, *(f"-D{name}={value}" for name, value in sorted(defines.items()))]
    digest = hashlib.sha256(source.read_bytes())
    for header in sorted(source.parent.glob("*.h")):  # what the source may include
        digest.update(header.read_bytes())
    digest.update(" ".join([compiler, *args]).encode())
    target = cache_dir() / f"{source.stem}-{digest.hexdigest()[:16]}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        built = Path(tmp) / target.name
        result = subprocess.run([compiler, *args, str(source), "-o", str(built)],
                                capture_output=True, text=True, check=False)
        if result.returncode:
            raise RuntimeError(f"building {source.name} failed:\n{result.stderr}")
        os.replace(built, target)
    return target


@cache
def load(name: str, **defines: int) -> ctypes.CDLL | None:
    """The kernel library ``name`` (a ``.c`` file beside this module) built with ``defines``.

    Returns ``None``, after one warning, when it cannot be built. Cached per arguments for
    the process.
    """
    why = _why_unavailable()
    if why is None:
        try:
            return ctypes.CDLL(str(_compile(Path(__file__).with_name(f"{name}.c"), defines)))
        except (OSError, RuntimeError) as error:
            why = str(error)
    warnings.warn(f"graphormer_sepnorm: plain torch instead of the {name} kernel: {why}",
                  RuntimeWarning, stacklevel=2)
    return None
