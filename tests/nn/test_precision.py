"""Under bf16 autocast the layers exchange bfloat16: no float32 round trips between them.

CUDA's autocast runs ``layer_norm`` in float32 and returns float32; the test applies that
policy on the CPU (``tests/nn/cuda_policy.py``), so a norm that returned float32 to the next
product would show here.
"""

import torch
from grid.test_store import mixed_graphs
from nn.cuda_policy import cuda_autocast
from nn.test_backends import model_pair

from graphormer_sepnorm.grid import GridGraphs
from graphormer_sepnorm.nn.precision import LayerNorm
from graphormer_sepnorm.nn.sepnorm import GraphTokenBatchNorm
from graphormer_sepnorm.training.packed import PackedReplicas


def test_layer_norm_keeps_bfloat16_under_cuda_autocast():
    norm = LayerNorm(8)
    x = torch.randn(4, 8).bfloat16()
    with cuda_autocast(), torch.autocast("cpu", torch.bfloat16):
        assert torch.nn.LayerNorm(8)(x).dtype == torch.float32  # the policy applied
        out = norm(x)
    assert out.dtype == torch.bfloat16
    expected = torch.nn.functional.layer_norm(x.float(), (8,), norm.weight, norm.bias)
    torch.testing.assert_close(out.float(), expected, rtol=1e-2, atol=1e-2)  # bf16 rounding


def _layer_output_dtypes(model, run):
    dtypes = {}

    def record(name):
        def hook(module, args, out):
            dtypes[name] = (out[0] if isinstance(out, tuple) else out).dtype
        return hook

    for name, module in model.named_modules():
        if name.startswith("layers.") or name in ("final_norm", "head"):
            module.register_forward_hook(record(name))
    with cuda_autocast(), torch.autocast("cpu", torch.bfloat16):
        out = run()
    assert out.dtype == torch.bfloat16 and dtypes
    return {name for name, dtype in dtypes.items() if dtype != torch.bfloat16}


def test_every_module_of_the_model_returns_bfloat16_under_cuda_autocast():
    model, _ = model_pair(torch.float32, multi_hop_max_dist=5, dropout=0.1)
    batch = GridGraphs(mixed_graphs(), multi_hop_max_dist=5).batch(torch.arange(10), 32)
    assert _layer_output_dtypes(model, lambda: model.train()(batch)) == set()
    statistics = [b for n, b in model.named_buffers() if "running" in n]
    assert statistics and all(b.dtype == torch.float32 for b in statistics)
    assert any(isinstance(m, GraphTokenBatchNorm) for m in model.modules())


def test_packed_replicas_compute_in_bfloat16_too():
    """Under vmap autocast reaches a linear layer's product, not its bias: the replicas'
    parameters are cast once (the graph-token BatchNorm's stay float32)."""
    model, _ = model_pair(torch.float32, multi_hop_max_dist=5, dropout=0.1)
    packed = PackedReplicas([model, model])
    batch = GridGraphs(mixed_graphs(), multi_hop_max_dist=5).batch(
        torch.arange(10).view(2, 5), 32)
    out = None

    def run():
        nonlocal out
        out = packed.train()(batch)
        return out

    assert _layer_output_dtypes(packed.skeleton, run) == set()
    out.float().sum().backward()
    assert packed.flat.grad.dtype == torch.float32 and packed.flat.grad.abs().sum() > 0
    assert packed.stacked_buffer("final_norm.cls_norm.running_mean").dtype == torch.float32
