"""What one command compiled, carried in the state to the next (on a fresh machine)."""

import lzma
import os
import subprocess
import sys
from pathlib import Path

from graphormer_sepnorm.campaign.compile_cache import (
    CACHE_FOLDER,
    cache_key,
    load_compile_cache,
    save_compile_cache,
)

COMPILE = """
import sys, torch
from pathlib import Path
from graphormer_sepnorm.campaign.compile_cache import load_compile_cache, save_compile_cache
state = Path(sys.argv[1])
print(load_compile_cache(state))
step = torch.compile(lambda x, w: torch.nn.functional.gelu(x @ w).sum(-1).softmax(-1))
step(torch.randn(16, 8), torch.randn(8, 8))
from torch._dynamo.utils import counters
hits = counters["inductor"]["fxgraph_cache_hit"], counters["aot_autograd"]["autograd_cache_hit"]
print("hits", *hits)
print(save_compile_cache(state, int(sys.argv[2])))
"""


def command(state: Path, cache_dir: Path, max_bytes: int = 2**24) -> list[str]:
    """A fresh process (its own empty inductor cache, as a fresh machine's) compiling a step."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", COMPILE, str(state), str(max_bytes)],
                          env=env, capture_output=True, text=True, timeout=300, check=True)
    return done.stdout.strip().splitlines()


def test_a_fresh_process_finds_what_the_last_one_compiled(tmp_path):
    state = tmp_path / "state"
    first = command(state, tmp_path / "machine1")
    assert first[0] == f"compile cache: none for {cache_key()}"
    assert first[1] == "hits 0 0" and "saved to" in first[2], first
    cache = state / CACHE_FOLDER / f"{cache_key()}.bin.xz"
    assert cache.is_file()
    second = command(state, tmp_path / "machine2")
    assert "entries loaded" in second[0] and second[1] == "hits 1 1", second
    # over the cap: reported, the file left as it was
    before = cache.read_bytes()
    third = command(state, tmp_path / "machine3", max_bytes=100)
    assert "over the" in third[2] and "not saved" in third[2] and cache.read_bytes() == before


def test_a_cache_that_cannot_be_read_is_reported_not_raised(tmp_path):
    folder = tmp_path / CACHE_FOLDER
    folder.mkdir()
    (folder / f"{cache_key()}.bin.xz").write_bytes(lzma.compress(b"not artifacts"))
    assert load_compile_cache(tmp_path).endswith("compiling afresh")
    (folder / f"{cache_key()}.bin.xz").write_bytes(b"not even lzma")
    assert load_compile_cache(tmp_path).endswith("compiling afresh")


def test_saving_with_nothing_compiled_keeps_the_file_and_others_keys_go(tmp_path,
                                                                        monkeypatch):
    import torch

    folder = tmp_path / CACHE_FOLDER
    folder.mkdir()
    mine = folder / f"{cache_key()}.bin.xz"
    mine.write_bytes(b"kept")
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: None)
    assert save_compile_cache(tmp_path, 2**20) == "compile cache: nothing compiled, kept as it was"
    assert mine.read_bytes() == b"kept"
    # another device's file goes when this one's is written
    other = folder / "torch0.0-sm00.bin.xz"
    other.write_bytes(b"old")
    info = type("Info", (), {"artifacts": {"inductor": ["key"]}})()
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (b"artifacts", info))
    assert "1 entries" in save_compile_cache(tmp_path, 2**20)
    assert not other.exists() and lzma.decompress(mine.read_bytes()) == b"artifacts"
