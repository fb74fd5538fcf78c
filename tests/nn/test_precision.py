"""Under bf16 autocast the layers exchange bfloat16: no float32 round trips between them.

CUDA's autocast runs ``layer_norm`` in float32 and returns float32; the test applies that
policy on the CPU (``benchmarks/_cuda_policy.py``, as ``gpu_roofline.py`` does), so a norm that
returned float32 to the next product would show here.
"""

import sys
from pathlib import Path

import torch
from data.test_grid import mixed_graphs
from nn.test_backends import model_pair

from graphormer_sepnorm.data.grid import GridGraphs
from graphormer_sepnorm.nn.precision import LayerNorm
from graphormer_sepnorm.nn.sepnorm import GraphTokenBatchNorm

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from _cuda_policy import cuda_autocast  # noqa: E402


def test_layer_norm_keeps_bfloat16_under_cuda_autocast():
    norm = LayerNorm(8)
    x = torch.randn(4, 8).bfloat16()
    with cuda_autocast(), torch.autocast("cpu", torch.bfloat16):
        assert torch.nn.LayerNorm(8)(x).dtype == torch.float32  # the policy applied
        out = norm(x)
    assert out.dtype == torch.bfloat16
    expected = torch.nn.functional.layer_norm(x.float(), (8,), norm.weight, norm.bias)
    torch.testing.assert_close(out.float(), expected, rtol=1e-2, atol=1e-2)  # bf16 rounding


def test_every_module_of_the_model_returns_bfloat16_under_cuda_autocast():
    model, _ = model_pair(torch.float32, multi_hop_max_dist=5, dropout=0.1)
    batch = GridGraphs(mixed_graphs(), multi_hop_max_dist=5).batch(torch.arange(10), 32)
    dtypes = {}

    def record(name):
        def hook(module, args, out):
            dtypes[name] = (out[0] if isinstance(out, tuple) else out).dtype
        return hook

    for name, module in model.named_modules():
        if name.startswith("layers.") or name in ("final_norm", "head"):
            module.register_forward_hook(record(name))
    with cuda_autocast(), torch.autocast("cpu", torch.bfloat16):
        out = model.train()(batch)
    assert out.dtype == torch.bfloat16 and dtypes
    assert {name for name, dtype in dtypes.items() if dtype != torch.bfloat16} == set()
    statistics = [b for n, b in model.named_buffers() if "running" in n]
    assert statistics and all(b.dtype == torch.float32 for b in statistics)
    assert any(isinstance(m, GraphTokenBatchNorm) for m in model.modules())
