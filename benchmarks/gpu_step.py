r"""Training steps per second: the plain Lightning loop against the GPU-first engine.

For Graphormer-slim (12 layers, hidden 80, 8 heads, 20 hops) on ZINC-subset (batch 256) and
MolHIV (batch 128), through ``lightning.Trainer.fit`` as the CLI runs it:

- ``lightning``: the collator's batches from a DataLoader (no engine), float32,
  ``deterministic='warn'`` as the dataset configs set it;
- ``engine``: ``configs/presets/gpu_fast.yaml``: grid batches gathered on the device
  (``graphormer_sepnorm.grid.GridEngine``), bf16-mixed and ``torch.compile`` on a GPU with the
  preset's mode (``--compile``; float32 and eager on a CPU, where the CPU wing's float32 path is
  the fast one), ``deterministic=False``; the warmup steps absorb the compilation;
- ``packed K``: the engine with ``K`` packed replicas (``--model.seeds``): ``model_steps_per_s``
  counts each replica's steps.

Each row: steps/s and graphs/s over ``--steps`` steps after ``--warmup``, peak device memory,
the achieved TFLOP/s (3x the forward's analytic matmul FLOPs at the batches' mean padded size)
against a matmul timed in the same process (bf16 8192^3 on a GPU, float32 1024^3 on a CPU),
and the projected minutes of the paper's 400k-step recipe. The last line sums it up:
``gpu_step device=... steps_per_s=... packed_k=... model_steps_per_s=... full_recipe_min=...``
(ZINC-subset: the engine's steps/s, the fastest packing and its model steps/s, 400k steps at
the engine's rate).

Data: ``--prepared DIR`` reads the training split of ``DIR/<dataset>/`` as
``python -m graphormer_sepnorm.datasets.prepared`` writes it (RDKit and ogb are needed for that
only: a GPU machine without them reads the arrays), else synthetic molecules with the datasets'
size distributions and feature dims (``--synthetic N``).

    python -m graphormer_sepnorm.datasets.prepared zinc_subset data/prepared/zinc_subset  # here
    python -m graphormer_sepnorm.datasets.prepared molhiv data/prepared/molhiv            # here
    python benchmarks/gpu_step.py --prepared data/prepared            # on the GPU
    python benchmarks/gpu_step.py --synthetic 64 --steps 2 --warmup 1 --batch-scale 0.05 \\
        --layers 2 --k 1 2                                           # a smoke run on a CPU
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml
from lightning.pytorch import Callback, Trainer
from torch_geometric.data import Data

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _flops import model_flops  # noqa: E402

from graphormer_sepnorm.datasets.base import GraphDataModule  # noqa: E402
from graphormer_sepnorm.datasets.prepared import load_graphs  # noqa: E402
from graphormer_sepnorm.grid import GridEngine  # noqa: E402
from graphormer_sepnorm.nn.config import GraphormerConfig  # noqa: E402
from graphormer_sepnorm.training.batch_statistics import (  # noqa: E402
    ReestimateGraphTokenStatistics,
)
from graphormer_sepnorm.training.factory import graphormer_module  # noqa: E402

# name: (batch size, atom feature dims, edge feature dims, task, synthetic sizes)
DATASETS = {
    "zinc_subset": (256, (28,), (4,), "regression", lambda g, n: g.normal(23.2, 4.5, n)),
    "molhiv": (128, (119, 5, 12, 12, 10, 6, 6, 2, 2), (5, 6, 2), "binary",
               lambda g, n: g.lognormal(3.15, 0.35, n)),
}
RECIPE_STEPS = 400_000
PRESET = Path(__file__).resolve().parents[1] / "configs" / "presets" / "gpu_fast.yaml"


def preset_compile_mode() -> str:
    """The ``model.compile`` of ``configs/presets/gpu_fast.yaml``."""
    return _preset()["model"]["compile"]


def preset_train_length() -> str:
    """The grid engine's ``train_length`` in ``configs/presets/gpu_fast.yaml``."""
    engine = _preset()["data"]["init_args"]["engine"]
    return engine.get("init_args", {}).get("train_length", "bucketed")


def _preset() -> dict:
    """``configs/presets/gpu_fast.yaml``, parsed."""
    return yaml.safe_load(PRESET.read_text())


def synthetic(name: str, count: int, seed: int = 0) -> list[Data]:
    """Random trees with ring closures, sized and featurized like the dataset's molecules."""
    _, atom_dims, edge_dims, task, sizes = DATASETS[name]
    gen = np.random.default_rng(seed)
    graphs = []
    for n in np.clip(sizes(gen, count).round(), 2, 222).astype(int):
        parents = [int(gen.integers(0, v)) for v in range(1, n)]
        edges = [(p, v) for v, p in zip(range(1, n), parents, strict=True)]
        edges += [(int(a), int(b)) for a, b in gen.integers(0, n, (n // 8, 2)) if a != b]
        ei = torch.tensor(edges + [(b, a) for a, b in edges]).t().contiguous()
        bond = np.stack([gen.integers(0, d, len(edges)) for d in edge_dims], 1)
        y = gen.normal() if task == "regression" else float(gen.random() < 0.1)
        graphs.append(Data(x=torch.from_numpy(np.stack([gen.integers(0, d, n) for d in atom_dims],
                                                         1)),
                           edge_index=ei, edge_attr=torch.from_numpy(np.concatenate([bond, bond])),
                           y=torch.tensor([[y]], dtype=torch.float), num_nodes=n))
    return graphs


class ListDataModule(GraphDataModule):
    """Given graphs as the training split (and a slice of them as val/test)."""

    def __init__(self, name: str, graphs: list[Data], **kwargs) -> None:
        super().__init__(**kwargs)
        self.name, self.graphs = name, graphs

    @property
    def dataset_info(self) -> dict:
        """The dataset's task and feature dims."""
        _, atom_dims, edge_dims, task, _ = DATASETS[self.name]
        return {"name": self.name, "task": task, "target_names": ["y"],
                "atom_feature_dims": list(atom_dims), "edge_feature_dims": list(edge_dims)}

    def load_splits(self) -> dict[str, list[Data]]:
        """The graphs for training; their first 64 for val and test (never timed)."""
        return {"train": self.graphs, "val": self.graphs[:64], "test": self.graphs[:64]}


class StepTimer(Callback):
    """Seconds of the ``steps`` steps after ``warmup`` (device work included), and why.

    Also each timed step's host seconds (from the previous step's end to its end, its batch's
    gather included, without waiting for the device: near the step's whole time, the step is
    bound by the host's launches), the graphs dynamo compiled, the CUDA graph skips and the
    padded lengths first seen (each a new shape: a compile or a CUDA graph recording) during
    the timed steps.
    """

    def __init__(self, warmup: int, steps: int) -> None:
        self.warmup, self.steps = warmup, steps
        self.start: float | None = None
        self.seconds, self.host, self.compiled, self.last_end = 0.0, [], {}, 0.0
        self.lengths: set[int] = set()
        self.new_lengths = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        """Starts the clock at the first timed step."""
        if trainer.global_step == self.warmup and self.start is None:
            sync()
            self.compiled = compile_counters()
            self.start = time.perf_counter()
        mask = getattr(batch, "node_mask", None)
        if mask is not None and mask.shape[-1] not in self.lengths:
            self.lengths.add(mask.shape[-1])
            self.new_lengths += self.start is not None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        """The host's seconds of a timed step."""
        now = time.perf_counter()
        if self.start is not None:
            self.host.append(now - max(self.last_end, self.start))
        self.last_end = now

    def on_train_end(self, trainer, pl_module) -> None:
        """Stops the clock once the device is done."""
        sync()
        self.seconds = time.perf_counter() - self.start
        before, self.compiled = self.compiled, compile_counters()
        self.compiled = {k: v - before.get(k, 0) for k, v in self.compiled.items()}

    def steady_seconds(self) -> float:
        """A timed step's seconds without the one-off ones (host time over 5x the median).

        Those compile or record a new shape; their wall time is their host time.
        """
        host = np.asarray(self.host)
        slow = host > 5 * np.median(host)
        if slow.all():
            return self.seconds / max(len(host), 1)
        return (self.seconds - host[slow].sum()) / (~slow).sum()


def sync() -> None:
    """Waits for the GPU's queued work (nothing on a CPU)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def compile_counters() -> dict[str, int]:
    """Dynamo's graphs compiled and inductor's CUDA graph skips so far in this process."""
    from torch._dynamo.utils import counters

    return {"graphs": counters["stats"]["unique_graphs"],
            "cudagraph_skips": counters["inductor"]["cudagraph_skips"]}


def fit(name: str, graphs: list[Data], args: argparse.Namespace, path: str,
        seeds: list[int] | None, batch_size: int) -> dict:
    """One timed fit; returns the row."""
    cuda = torch.cuda.is_available()
    engine = path != "lightning"
    data = ListDataModule(name, graphs, batch_size=batch_size,
                          engine=GridEngine(args.train_length) if engine else None,
                          replica_seeds=seeds)
    config = GraphormerConfig(num_layers=args.layers, multi_hop_max_dist=args.hops)
    model = graphormer_module(dataset_info=data.dataset_info, config=config, seeds=seeds,
                             warmup_steps=1, total_steps=args.warmup + args.steps,
                             compile=args.compile if engine else None)
    timer = StepTimer(args.warmup, args.steps)
    trainer = Trainer(accelerator="gpu" if cuda else "cpu", devices=1, logger=False,
                      max_steps=args.warmup + args.steps, max_epochs=-1,
                      precision="bf16-mixed" if engine and cuda else "32-true",
                      deterministic=False if engine else "warn", gradient_clip_val=5.0,
                      limit_val_batches=0, num_sanity_val_steps=0, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False,
                      callbacks=[timer, ReestimateGraphTokenStatistics()])  # as the configs
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    trainer.fit(model, data)
    steps_per_s = args.steps / timer.seconds
    replicas = len(seeds) if seeds else 1
    # the grid's one length where it pads every batch alike (train_length: longest), else the
    # batches' mean (the DataLoader's, or the grid's buckets)
    padded = getattr(data.train_dataloader(), "length", None) or mean_padded_atoms(
        graphs, batch_size)
    flops = 3 * model_flops(batch_size, padded, args.layers)
    return {"dataset": name, "path": path, "replicas": replicas, "steps_per_s": steps_per_s,
            "graphs_per_s": steps_per_s * batch_size * replicas,
            "model_steps_per_s": steps_per_s * replicas,
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan"),
            "tflops": flops * replicas * steps_per_s / 1e12,
            "recipe_min": RECIPE_STEPS / (steps_per_s * replicas) / 60,
            "host_ms": 1e3 * float(np.median(timer.host)), "step_ms": 1e3 / steps_per_s,
            "steady_ms": 1e3 * float(timer.steady_seconds()),
            "timed_new_lengths": timer.new_lengths,
            **{f"timed_{k}": v for k, v in timer.compiled.items()}}


def mean_padded_atoms(graphs: list[Data], batch_size: int, samples: int = 50) -> float:
    """The mean largest molecule of random batches (the padded atom count)."""
    sizes, gen = np.array([g.num_nodes for g in graphs]), np.random.default_rng(0)
    batch_size = min(batch_size, len(sizes))
    return float(np.mean([sizes[gen.choice(len(sizes), batch_size, replace=False)].max()
                          for _ in range(samples)]))


def matmul_tflops() -> float:
    """A reference matmul's TFLOP/s: bf16 8192^3 on a GPU, float32 1024^3 on a CPU."""
    cuda = torch.cuda.is_available()
    size, dtype = (8192, torch.bfloat16) if cuda else (1024, torch.float32)
    a = torch.randn(size, size, dtype=dtype, device="cuda" if cuda else "cpu")
    for _ in range(2):
        a @ a
    sync()
    start, calls = time.perf_counter(), 10 if cuda else 3
    for _ in range(calls):
        a @ a
    sync()
    return 2 * size**3 * calls / (time.perf_counter() - start) / 1e12


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--prepared", type=Path,
                        help="read the training split of DIR/<dataset>/ (prepared splits)")
    parser.add_argument("--synthetic", type=int, default=4096,
                        help="synthetic molecules per dataset without --graphs (default 4096)")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--k", type=int, nargs="+", default=[1, 2, 4, 8],
                        help="packed replica counts (default 1 2 4 8)")
    parser.add_argument("--steps", type=int, default=200, help="timed steps (default 200)")
    parser.add_argument("--warmup", type=int, default=30, help="untimed steps (default 30)")
    parser.add_argument("--layers", type=int, default=12, help="default 12 (Graphormer-slim)")
    parser.add_argument("--hops", type=int, default=20, help="multi_hop_max_dist (default 20)")
    parser.add_argument("--compile", default=preset_compile_mode() if torch.cuda.is_available()
                        else None,
                        help="torch.compile mode of the engine's model (default: the gpu_fast "
                             "preset's on a GPU, none on a CPU); 'none' for eager")
    parser.add_argument("--batch-scale", type=float, default=1.0,
                        help="scales the batch sizes (256, 128), for smoke runs")
    parser.add_argument("--train-length", choices=["bucketed", "longest"],
                        default=preset_train_length(),
                        help="the engine's training batches' padding (default: the gpu_fast "
                             "preset's)")
    parser.add_argument("--paths", nargs="+", default=["lightning", "engine", "packed"],
                        choices=["lightning", "engine", "packed"],
                        help="which rows (default all; packed: one per --k)")
    args = parser.parse_args(argv)
    args.compile = None if args.compile in (None, "none") else args.compile
    torch.set_float32_matmul_precision("high")
    reference = matmul_tflops()
    rows = []
    for name in args.datasets:
        graphs = (load_graphs(args.prepared / name / "train.npz") if args.prepared
                  else synthetic(name, args.synthetic))
        batch_size = max(2, round(DATASETS[name][0] * args.batch_scale))
        for path, seeds in planned_runs(args):
            row = fit(name, graphs, args, path, seeds, batch_size) | {"batch": batch_size}
            row["of_matmul"] = row["tflops"] / reference
            rows.append(row)
            print(f"{name:12s} {path:10s} {row['steps_per_s']:8.1f} steps/s "
                  f"{row['graphs_per_s']:9.0f} graphs/s {row['model_steps_per_s']:8.1f} model "
                  f"steps/s {row['peak_gib']:6.2f} GiB {row['tflops']:7.3f} TFLOP/s "
                  f"({row['of_matmul']:.1%} of {reference:.1f}) 400k steps: "
                  f"{row['recipe_min']:.0f} min; host {row['host_ms']:.2f} of "
                  f"{row['step_ms']:.2f} ms a step ({row['steady_ms']:.2f} without the slow "
                  f"ones); while timed: {row['timed_graphs']} graph(s) compiled, "
                  f"{row['timed_cudagraph_skips']} CUDA graph skip(s), "
                  f"{row['timed_new_lengths']} new padded length(s)", flush=True)
    summary(rows)
    return rows


def planned_runs(args: argparse.Namespace) -> list[tuple[str, list[int] | None]]:
    """``(path, seeds)`` of each timed fit, in order."""
    runs: list[tuple[str, list[int] | None]] = []
    runs += [("lightning", None)] if "lightning" in args.paths else []
    runs += [("engine", None)] if "engine" in args.paths else []
    runs += [(f"packed {k}", list(range(k))) for k in args.k if "packed" in args.paths]
    return runs


def summary(rows: list[dict]) -> None:
    """The last line (ZINC-subset if measured, else the first dataset)."""
    name = "zinc_subset" if any(r["dataset"] == "zinc_subset" for r in rows) else rows[0][
        "dataset"]
    mine = [r for r in rows if r["dataset"] == name]
    engine = next((r for r in mine if r["path"].startswith("engine")), mine[0])
    best = max((r for r in mine if r["path"].startswith("packed")),
               key=lambda r: r["model_steps_per_s"], default=engine)
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    print(f"gpu_step device={device.replace(' ', '_')} steps_per_s={engine['steps_per_s']:.1f} "
          f"packed_k={best['replicas']} model_steps_per_s={best['model_steps_per_s']:.1f} "
          f"full_recipe_min={engine['recipe_min']:.1f}")


if __name__ == "__main__":
    main()
