"""CUDA checks: the smoke check of a GPU machine (``pytest -m gpu tests/gpu``); skipped without.

What only a GPU can show: the grid batch computes the collated batch's function in float32 on
CUDA (the CUDA wing's attention included), the compiled model the eager one's, a bf16-mixed fit
of packed replicas trains, and K=2 packed replicas train as two single runs. Only RDKit-free
modules are imported (a GPU image may lack RDKit); together they take well under a minute
(most of it compiling).

``GRAPHORMER_SEPNORM_GPU_TESTS_DEVICE=cpu`` runs them on the CPU instead, e.g. under another
torch's Python, so that what breaks on that torch breaks before a GPU is spent on it.
"""

import copy
import os
import sys
from pathlib import Path

import pytest
import torch
from graphs import ATOM_DIMS, BOND_DIMS, random_graph

from graphormer_sepnorm.data import GraphormerCollator, add_shortest_paths
from graphormer_sepnorm.grid import GridEngine, GridGraphs
from graphormer_sepnorm.nn import Graphormer, GraphormerConfig, set_backend
from graphormer_sepnorm.nn.compiling import compile_kwargs
from graphormer_sepnorm.training.batch_statistics import (
    ReestimateGraphTokenStatistics,
)

DEVICE = torch.device(os.environ.get("GRAPHORMER_SEPNORM_GPU_TESTS_DEVICE", "cuda"))
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(DEVICE.type == "cuda" and not torch.cuda.is_available(),
                                 reason="needs CUDA")]
NO_DROPOUT = dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)


def graphs():
    """Sizes 1 to 30 and disconnected ones, with targets."""
    out = [random_graph(n, s, p=0.3, y=float(s)) for s, n in enumerate([3, 30, 5, 22, 8, 4, 12])]
    out += [random_graph(9, seed=40, p=0.05, y=1.0), random_graph(1, seed=41, y=2.0)]
    return add_shortest_paths(out)


def model(dtype=torch.float32, **kwargs) -> Graphormer:
    torch.manual_seed(0)
    config = GraphormerConfig(tuple(ATOM_DIMS), tuple(BOND_DIMS), num_tasks=1, num_layers=3,
                              hidden_dim=16, ffn_dim=24, num_heads=4, multi_hop_max_dist=5,
                              **(NO_DROPOUT | kwargs))
    # the CUDA wing on CUDA; the reference where these run on the CPU
    net = set_backend(Graphormer(config), "cuda" if DEVICE.type == "cuda" else "reference")
    net = net.to(DEVICE, dtype)
    for parameter in net.parameters():  # away from the initialization's symmetries
        parameter.data.add_(torch.randn_like(parameter) * 0.1)
    return net


def forward_backward(net: Graphormer, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    net.train().zero_grad()
    out = net(batch)
    out.pow(2).sum().backward()
    return out.detach(), {n: p.grad.clone() for n, p in net.named_parameters()
                          if p.grad is not None}


def assert_close_all(a, b, tolerance: float) -> None:
    torch.testing.assert_close(a[0], b[0], rtol=tolerance, atol=tolerance)
    assert a[1].keys() == b[1].keys()
    for name, grad in a[1].items():
        torch.testing.assert_close(grad, b[1][name], rtol=tolerance, atol=tolerance, msg=name)


def test_grid_batch_equals_collated_batch_in_float32():
    data = graphs()
    collated = GraphormerCollator(multi_hop_max_dist=5)(data).to(DEVICE)
    store = GridGraphs(data, multi_hop_max_dist=5, device=DEVICE)
    index = torch.arange(len(data), device=DEVICE)
    grid = store.batch(index, store.length_for(index.cpu().numpy()))
    net = model()
    assert_close_all(forward_backward(net, collated), forward_backward(copy.deepcopy(net), grid),
                     1e-4)


def test_compiled_equals_eager():
    data = graphs()
    store = GridGraphs(data, multi_hop_max_dist=5, device=DEVICE)
    index = torch.arange(len(data), device=DEVICE)
    batch = store.batch(index, store.length_for(index.cpu().numpy()))
    eager = model()
    compiled = copy.deepcopy(eager)
    compiled.compile(**compile_kwargs())  # the package's inductor workaround
    assert_close_all(forward_backward(eager, batch), forward_backward(compiled, batch), 1e-4)


def test_bf16_mixed_fit_of_a_few_steps_with_packed_replicas(tmp_path):
    from lightning.pytorch import Trainer

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from gpu_step import ListDataModule, synthetic

    from graphormer_sepnorm.training.packed_module import PackedGraphormerModule

    data = ListDataModule("zinc_subset", synthetic("zinc_subset", 64), batch_size=16,
                          engine=GridEngine(train_length="longest"), replica_seeds=[0, 1])
    config = GraphormerConfig(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=4,
                              multi_hop_max_dist=5)
    module = PackedGraphormerModule(dataset_info=data.dataset_info, config=config, seeds=[0, 1],
                              warmup_steps=1, total_steps=6, compile="default")
    accelerator = "gpu" if DEVICE.type == "cuda" else "cpu"
    trainer = Trainer(accelerator=accelerator, devices=1, precision="bf16-mixed", max_steps=6,
                      default_root_dir=tmp_path,
                      logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      gradient_clip_val=5.0, val_check_interval=3,
                      check_val_every_n_epoch=None, deterministic=False,
                      callbacks=[ReestimateGraphTokenStatistics()])  # as the dataset configs
    trainer.fit(module, data)
    assert trainer.global_step == 6
    assert torch.isfinite(trainer.callback_metrics["train/loss"])
    assert torch.isfinite(trainer.callback_metrics["val/mae"])
    statistics = [b for n, b in module.named_buffers() if "running" in n]
    assert statistics and all(b.dtype == torch.float32 for b in statistics)


def test_two_packed_replicas_train_as_two_single_runs_on_cuda():
    """As ``tests/training/test_packed.py`` on the CPU: packed training's AdamW (fused, on the
    flat parameter, each replica clipped by its own norm), whose decay skips the parameters no
    loss reaches (the last layer's atom norms), as ``torch.optim.AdamW`` skips them in a single
    run (their gradient is ``None`` there)."""
    from graphormer_sepnorm.training.packed import (
        PackedReplicas,
        clip_grad_norm_per_replica,
        exempt_untrained,
    )

    data = graphs()
    store = GridGraphs(data, multi_hop_max_dist=5, device=DEVICE)
    first, second = model(torch.float64), model(torch.float64)  # SDPA among the two kernels
    with torch.no_grad():
        for parameter in second.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    gen = torch.Generator().manual_seed(0)
    batches = torch.stack([torch.stack([torch.randperm(len(data), generator=gen)[:4]
                                        for _ in range(2)]) for _ in range(4)]).to(DEVICE)
    singles = [copy.deepcopy(first), copy.deepcopy(second)]
    packed = PackedReplicas([first, second])
    optimizer = torch.optim.AdamW([packed.flat], lr=1e-2, weight_decay=0.01, fused=True)
    exempt_untrained(optimizer, packed)
    for index in batches:
        batch = store.batch(index, 32)
        loss = sum(torch.nn.functional.mse_loss(o, y.to(o.dtype)) for o, y in
                   zip(packed(batch), batch.y, strict=True))
        optimizer.zero_grad()
        loss.backward()
        clip_grad_norm_per_replica([packed.flat], 0.05)
        optimizer.step()
    for r, single in enumerate(singles):
        optimizer = torch.optim.AdamW(single.parameters(), lr=1e-2, weight_decay=0.01)
        for index in batches[:, r]:
            batch = store.batch(index, 32)
            loss = torch.nn.functional.mse_loss(single(batch), batch.y.double())
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(single.parameters(), 0.05)
            optimizer.step()
        got = packed.replica(r).state_dict()
        for name, value in single.state_dict().items():
            torch.testing.assert_close(got[name].to(DEVICE), value, rtol=1e-6, atol=1e-6,
                                       msg=name)
