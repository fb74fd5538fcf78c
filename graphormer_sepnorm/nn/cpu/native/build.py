"""Builds the C kernels at first use with the system C compiler, loads and runs them.

Plain C with AVX2 intrinsics and no Python or torch headers: a build takes about a second and
needs only ``cc``. Builds are cached under ``$GRAPHORMER_SEPNORM_CACHE`` (default
``~/.cache/graphormer_sepnorm``), named by a hash of source, flags and compiler, and written
through a temporary file, so processes starting together (DDP) do not clash. Where the CPU lacks
AVX2, no compiler is found or a build fails, :func:`load` warns once and the callers compute the
same function in plain torch (dropout draws differ).

:func:`run_split` runs a kernel over slices of its work on ``torch.get_num_threads()`` Python
threads (ctypes drops the GIL); kernels index their work absolutely, so results (dropout masks
included) do not depend on the split.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import torch

FLAGS = ("-O3", "-mavx2", "-mfma", "-fPIC", "-shared", "-fno-math-errno")
"""Compiler flags; no ``-ffast-math``, which would drop the ``-inf`` of masked keys."""

PARALLEL_ABOVE = 1 << 15
"""Work (elements or scores) above which :func:`run_split` uses threads; below, one call."""


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


@cache
def _pool(workers: int, pid: int) -> ThreadPoolExecutor:
    """A pool per process: a forked child (a data loader worker) must not reuse its parent's."""
    return ThreadPoolExecutor(workers, thread_name_prefix="graphormer_sepnorm_native")


def run_split(call: Callable[[int, int], object], total: int, work: int,
              align: int = 1) -> list[object]:
    """``call(begin, end)`` over ``[0, total)``, split over threads when ``work`` is large.

    Args:
        call: runs one slice and returns the kernel's status.
        total: units to split (pairs, elements).
        work: how much work all units are, compared with :data:`PARALLEL_ABOVE`.
        align: slice bounds are multiples of this (e.g. whole vectors).

    Returns:
        Each slice's return value.
    """
    workers = min(torch.get_num_threads(), max(total // align, 1))
    if workers < 2 or work <= PARALLEL_ABOVE:
        return [call(0, total)]
    cuts = [min(total, (total * w // workers + align - 1) // align * align)
            for w in range(workers)] + [total]
    bounds = list(zip(cuts[:-1], cuts[1:], strict=True))
    return list(_pool(workers, os.getpid()).map(lambda bound: call(*bound), bounds))
