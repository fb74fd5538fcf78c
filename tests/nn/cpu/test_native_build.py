"""Building the C kernels: the cache, and falling back when no build is possible."""

import platform
import warnings

import pytest
import torch
from graphs import ATOM_DIMS, BOND_DIMS, random_graph

from graphormer_sepnorm.data import GraphormerCollator
from graphormer_sepnorm.nn import Graphormer, GraphormerConfig, set_backend
from graphormer_sepnorm.nn.cpu.native import build, fused_attention, fused_dropout


def forget_loaded_libraries():
    for cached in (build.load, fused_attention._kernels, fused_dropout._kernels):
        cached.cache_clear()


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty build cache and no library loaded yet in this process."""
    monkeypatch.setenv("GRAPHORMER_SEPNORM_CACHE", str(tmp_path))
    forget_loaded_libraries()
    yield tmp_path
    forget_loaded_libraries()


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="AVX2 kernels")
def test_kernels_build_on_an_x86_machine_with_a_compiler(fresh):
    """CI's machine has gcc and AVX2: the tests must run the kernels, not the fallback."""
    assert build._why_unavailable() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert build.load("dropout") is not None
        assert build.load("fused_attention", HEAD_DIM=10) is not None
    assert fused_dropout.usable(torch.zeros(1 << 16))
    assert fused_attention.usable(torch.zeros(1), 10)


def test_builds_once_into_the_cache(fresh):
    if build._why_unavailable() is not None:
        pytest.skip(build._why_unavailable())
    assert build.load("dropout") is not None
    libraries = list((fresh / "native").glob("dropout-*.so"))
    assert len(libraries) == 1
    build.load.cache_clear()
    stamp = libraries[0].stat().st_mtime_ns
    assert build.load("dropout") is not None
    assert libraries[0].stat().st_mtime_ns == stamp  # reused, not rebuilt
    assert build.load("fused_attention", HEAD_DIM=4) is not None
    assert len(list((fresh / "native").glob("fused_attention-*.so"))) == 1


def test_a_failed_build_warns_and_falls_back(fresh, monkeypatch):
    monkeypatch.setenv("CC", "false")  # a "compiler" that always fails
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    with pytest.warns(RuntimeWarning, match="plain torch instead of the dropout kernel"):
        assert build.load("dropout") is None
    assert not fused_dropout.usable(torch.zeros(1 << 16))
    assert not list(fresh.rglob("*.so"))


def test_no_avx2_means_no_build(fresh, monkeypatch):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    with pytest.warns(RuntimeWarning, match="lacks AVX2"):
        assert build.load("dropout") is None


@pytest.mark.parametrize("train", [False, True])
def test_model_with_kernels_equals_model_without(fresh, monkeypatch, train):
    """The C kernels against plain torch through the whole model (no dropout: same masks)."""
    if build._why_unavailable() is not None:
        pytest.skip(build._why_unavailable())
    graphs = [random_graph(n, seed=s, p=0.3) for s, n in enumerate([4, 30, 6, 5, 17, 3, 9])]
    batch = GraphormerCollator()(graphs)
    results = []
    for kernels in (True, False):
        if not kernels:  # as on a machine without a compiler
            monkeypatch.setattr(build, "_why_unavailable", lambda: "no kernels in this run")
            warnings.simplefilter("ignore", RuntimeWarning)
        forget_loaded_libraries()
        torch.manual_seed(0)
        config = GraphormerConfig(tuple(ATOM_DIMS), tuple(BOND_DIMS), num_tasks=2,
                                  num_layers=3, hidden_dim=32, ffn_dim=24, num_heads=4,
                                  dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
        model = set_backend(Graphormer(config), "cpu").train(train)
        assert fused_attention.usable(torch.zeros(1), 8) == kernels
        out = model(batch)
        out.backward(torch.linspace(-1, 1, out.numel()).view_as(out))
        results.append((out, [p.grad for p in model.parameters()]))
    (out_c, grads_c), (out_t, grads_t) = results
    torch.testing.assert_close(out_c, out_t, atol=1e-5, rtol=1e-5)
    for a, b in zip(grads_c, grads_t, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
