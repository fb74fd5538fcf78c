"""Compiled code carried from one command to the next, in the campaign's state folder.

On a lent H200 (2026-11-27) compiling the packed training step took about 100 s of each
command's 580, for every job, every lease: a fresh machine starts with an empty inductor cache
(and that cache, 941 MB there, is too big to carry). torch's portable cache artifacts
(``torch.compiler.save_cache_artifacts``: the inductor and AOTAutograd entries of what this
process compiled, Triton's kernels bundled in) are a fraction of that; compressed, they go into
``STATE/compile-cache/<key>.bin.xz`` at the end of a command, and the next command loads them
before it compiles, so that a job resumed on another machine of the same kind finds its step
compiled. The key names the torch version and the device (CUDA capability), so another image
or GPU generation never reads them (torch's own keys would miss anyway). Every step is
best-effort: a cache that cannot be read, written or fitted under the size cap is reported and
ignored, never fatal.
"""

from __future__ import annotations

import lzma
import re
from pathlib import Path

import torch

from graphormer_sepnorm.campaign.state import atomic_write_bytes

__all__ = ["CACHE_FOLDER", "cache_key", "load_compile_cache", "save_compile_cache"]

#: The folder in the state that holds the artifacts, one file per key.
CACHE_FOLDER = "compile-cache"
#: Artifacts more than this many times the cap are not compressed: they would not fit.
RATIO = 8


def cache_key() -> str:
    """This process's torch and device, as a file name: ``torch2.11.0+cu130-sm90`` or ``-cpu``."""
    device = "cpu"
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        device = f"sm{major}{minor}"
    return re.sub(r"[^A-Za-z0-9.+_-]", "_", f"torch{torch.__version__}-{device}")


def _path(state: Path) -> Path:
    return state / CACHE_FOLDER / f"{cache_key()}.bin.xz"


def load_compile_cache(state: Path) -> str:
    """Loads the artifacts saved under this key, if any; what happened, as a line to print."""
    path = _path(state)
    if not path.is_file():
        return f"compile cache: none for {cache_key()}"
    try:
        info = torch.compiler.load_cache_artifacts(lzma.decompress(path.read_bytes()))
    except Exception as error:  # a cache is a saving, never a reason to stop
        return f"compile cache: {path.name} not loaded ({error!r}); compiling afresh"
    entries = sum(len(v) for v in info.artifacts.values()) if info is not None else 0
    if not entries:  # torch logs why (a bad checksum, another format) and loads nothing
        return f"compile cache: nothing loadable in {path.name}; compiling afresh"
    return f"compile cache: {entries} entries loaded from {path.name}"


def save_compile_cache(state: Path, max_bytes: int) -> str:
    """Saves what this process compiled (or found in the cache) under this key.

    Files of other keys are removed (a state carries one device's code). Nothing compiled: the
    file stays as it was. Over ``max_bytes`` compressed: not saved, the size reported.
    """
    try:
        saved = torch.compiler.save_cache_artifacts()
        entries = 0 if saved is None else sum(len(v) for v in saved[1].artifacts.values())
        if not entries:
            return "compile cache: nothing compiled, kept as it was"
        if len(saved[0]) > RATIO * max_bytes:  # not worth the seconds compressing it
            return (f"compile cache: {len(saved[0]) / 2**20:.1f} MiB, far over the "
                    f"{max_bytes / 2**20:.1f} MiB cap; not saved")
        data = lzma.compress(saved[0], preset=1)  # seconds at the end of a command count
        if len(data) > max_bytes:
            return (f"compile cache: {len(data) / 2**20:.1f} MiB compressed, over the "
                    f"{max_bytes / 2**20:.1f} MiB cap; not saved")
        path = _path(state)
        path.parent.mkdir(parents=True, exist_ok=True)
        for other in path.parent.glob("*.bin.xz"):
            if other != path:
                other.unlink()
        atomic_write_bytes(data, path)
    except Exception as error:
        return f"compile cache: not saved ({error!r})"
    return (f"compile cache: {entries} entries, {len(saved[0]) / 2**20:.1f} MiB "
            f"({len(data) / 2**20:.1f} compressed) saved to {path.name}")
