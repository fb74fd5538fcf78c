r"""An H100 bound on training speed, estimated on the CPU from the compiled training step.

The engine's training step (``gpu_fast``: grid batches, bf16-mixed, ``torch.compile``) is built
as the engine and Lightning run it (the batch's gather from the split stored on the device,
``training_step`` under autocast, backward, ``configure_gradient_clipping``, the optimizer's and
the schedule's steps), for one model (``engine``) and for ``K`` packed replicas, and its second
step is counted without computing anything (``_roofline.py`` says how): kernel launches
(inductor's kernels and extern calls of each compiled graph, plus every kernel-launching aten
call outside the graphs), bytes they read and write, FLOPs and host synchronizations. From
these, H100 bounds: launches at 4 us each (1.5 us inside CUDA graphs, ``compile:
reduce-overhead``), bytes at 3.0 TB/s, FLOPs at 800 TFLOP/s; the step takes at least the largest
of the three (the binding bound), which gives model-steps/s and the minutes of the tables
(training steps only): ZINC-subset 8 runs x 400k steps, MolHIV 8 runs x 20 epochs of 257 steps,
each at the rate of its packed step. Beside the step, one batch of the graph-token statistics
pass (``stats``) and of validation (``val``), as launches and host synchronizations.

A step's cost depends on its padded length. The preset pads every training batch to the split's
largest molecule (``data.train_length: longest``; ``--train-length`` overrides it), so one
length is counted. With ``bucketed`` lengths random steps take several (MolHIV's batches of
128 pad to 56 to 224 atoms; K packed replicas' batches pad together, to their largest): each
length that at least ``--min-share`` of 1,000 random steps take is compiled and counted
afresh, and the path's figures are share-weighted (``--one-length``: one random step's).
The training batches hold their tokens as the preset's do (``data.train_tokens``; ``rows``: the
layers' token-wise work on real atoms only; ``sequences``: rows, and attention in sequences of
several molecules; ``grid``: every grid position; ``--train-tokens`` overrides it). Where
sequences attend through the row attention op, its bias is counted at the pairs of one graph
its kernels read and write (``_roofline.PairShare``, from the measured batch; the row prints
the shares).

Beside that bound, the same with L2 reuse (``_roofline.hbm_bytes``: a read of a buffer touched
within the last 40 MB of buffers hits the H100's 50 MB L2): the step takes at least the
largest of launches, those HBM bytes and FLOPs. And "kernels in turn": the kernels run one
after another, each at least its launch, its own bytes or its own FLOPs, summed (every byte
from HBM); the step's small kernels then cost their launches even where bytes bind the step
as a whole. It is never below the first bound; the L2 bound and this one bracket what a GPU
should measure, unless its kernels fall short of their own bounds.

What it cannot see: kernel time beyond these bounds (a small kernel takes longer than its
bytes), cache behaviour beyond that model, the host's own time per step
(Python, Lightning), and where CPU lowering differs from CUDA's (inductor lowers on the CPU,
then fuses with its CUDA rules). ``gpu_step.py`` measures; this one explains.

    python benchmarks/gpu_roofline.py                   # full sizes, both datasets (minutes)
    python benchmarks/gpu_roofline.py --datasets zinc_subset --k 2 8
    python benchmarks/gpu_roofline.py --layers 2 --batch-scale 0.05 --k 1 2   # a smoke run

The last line: ``gpu_roofline launches_k2=N launches_k8=N table_min=M molhiv_min=M
table_min_l2=M molhiv_min_l2=M table_min_serial=M molhiv_min_serial=M`` (ZINC-subset launches
per packed step at K=2 and K=8; the ZINC-subset and MolHIV tables' minutes at the binding
bound of the largest K measured, K=8 by default, every byte from HBM, then with L2 reuse, then
with the kernels in turn).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from lightning.pytorch import Trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _roofline  # noqa: E402
from _cuda_policy import (  # noqa: E402
    cuda_attention,
    cuda_autocast,
    cuda_gather,
    row_attention_applies,
)
from _roofline import H100, InductorRecorder, PairShare, eager_costs  # noqa: E402
from gpu_step import (  # noqa: E402
    DATASETS,
    preset_compile_mode,
    preset_train_length,
    preset_train_tokens,
    synthetic,
)

from graphormer_sepnorm.data import sequences  # noqa: E402
from graphormer_sepnorm.data.grid import GridGraphs  # noqa: E402
from graphormer_sepnorm.datasets.prepared import load_graphs  # noqa: E402
from graphormer_sepnorm.nn.config import GraphormerConfig  # noqa: E402
from graphormer_sepnorm.training.batch_statistics import (  # noqa: E402
    ReestimateGraphTokenStatistics,
)
from graphormer_sepnorm.training.factory import graphormer_module  # noqa: E402

#: model-steps of each table: 8 runs (4 seeds x 2 norms) of the recipe's steps.
TABLES = {"zinc_subset": 8 * 400_000, "molhiv": 8 * 20 * 257}
HOPS = {"zinc_subset": 20, "molhiv": 5}
#: Molecules in the statistics and validation batches counted. They run eagerly, and what is
#: counted of them (launches, host syncs) does not depend on their size; at the training
#: batch's size K=8's validation materialized every replica's ``[P, S, H]`` hop embeddings and
#: ran out of this machine's 24 GB.
EVAL_BATCH = 32


def build(name: str, seeds: list[int] | None, args: argparse.Namespace) -> tuple[Any, ...]:
    """The module (reference backend, compiled as on a GPU), its optimizer and schedule."""
    _, atom_dims, edge_dims, task, _ = DATASETS[name]
    info = {"name": name, "task": task, "target_names": ["y"],
            "atom_feature_dims": list(atom_dims), "edge_feature_dims": list(edge_dims)}
    config = model_config(name, args)
    module = graphormer_module(dataset_info=info, config=config, seeds=seeds, backend="reference",
                              compile=args.compile, warmup_steps=10, total_steps=1000)
    module.trainer = Trainer(accelerator="cpu", devices=1, precision="bf16-mixed", logger=False,
                             enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, max_steps=1000)
    module.log = lambda *a, **k: None  # no loop to log into
    module._compiles_here = lambda: True  # as on a GPU
    module.configure_model()
    answer = module.configure_optimizers()
    return module, answer["optimizer"], answer["lr_scheduler"]["scheduler"]


def model_config(name: str, args: argparse.Namespace) -> GraphormerConfig:
    """The measured model's configuration: Graphormer-slim, ``--layers`` layers."""
    return GraphormerConfig(num_layers=args.layers, multi_hop_max_dist=HOPS[name])


def batches(store: GridGraphs, batch_size: int, replicas: int | None,
            gen: np.random.Generator, length: int | None = None,
            pad_to: int | None = None, tokens: str = "grid") -> Callable[[], Any]:
    """A random training batch (``[R, B]`` for packed replicas), padded as the engine pads.

    With ``length``, the first random batch that pads to it; with ``pad_to``, a random batch
    padded to that (``train_length: longest``); its ``tokens`` as the engine holds them
    (``train_tokens``: also as packed rows, and placed in attention sequences). Returns the
    gather that makes it (``DeviceBatches`` runs it at each step, eagerly).
    """
    atom_rows = store.atom_rows_for(batch_size) if tokens != "grid" else None
    shape = sequences.shape_for(store.sizes, batch_size) if tokens == "sequences" else None
    for _ in range(100_000):
        index = _random_step(store, batch_size, replicas or 1, gen)
        index = index if replicas else index[0]
        padded = pad_to or store.length_for(index.reshape(-1))
        placed = shape and sequences.place(store.sizes, index, *shape)
        if length in (None, padded) and (placed or not shape):
            counted = atom_rows and store.rows_for(index, atom_rows, padded)
            index, first = placed or (index, None)
            return lambda: store.batch(torch.from_numpy(index), padded, counted,
                                       shape and (torch.from_numpy(first), *shape))
    raise ValueError(f"no random batch of {batch_size} pads to {length}")


def _random_step(store: GridGraphs, batch_size: int, replicas: int,
                 gen: np.random.Generator) -> np.ndarray:
    """A random training step's graphs, ``[replicas, batch_size]``: each replica's own batch."""
    return np.stack([gen.choice(len(store), batch_size, replace=False)
                     for _ in range(replicas)])


def length_mix(store: GridGraphs, batch_size: int, replicas: int, min_share: float,
               draws: int = 1000) -> dict[int, float]:
    """The padded lengths of random steps (``replicas`` batches padded together), by share.

    Lengths under ``min_share`` of the draws are left out, the others' shares renormalized.
    """
    gen = np.random.default_rng(1)
    lengths = [store.length_for(_random_step(store, batch_size, replicas, gen).reshape(-1))
               for _ in range(draws)]
    values, counts = np.unique(lengths, return_counts=True)
    kept = {int(v): c for v, c in zip(values, counts, strict=True) if c >= min_share * draws}
    kept = kept or {int(values[counts.argmax()]): 1}
    return {v: float(c / sum(kept.values())) for v, c in kept.items()}


def combined(parts: list[tuple[float, dict[str, Any]]]) -> dict[str, Any]:
    """One path's row over the padded lengths its steps take (``(share, row)`` each).

    Per-step figures are share-weighted means, the tables' minutes share-weighted sums (each
    step at its length's rate); the rest (statistics, validation, ``largest``) is the most
    common length's.
    """
    if len(parts) == 1:
        return parts[0][1]
    common = max(parts, key=lambda part: part[0])[1]
    row = dict(common, length="mix", lengths={r["length"]: share for share, r in parts},
               recompiles=sum(r["recompiles"] for _, r in parts))
    for key in ("launches", "graph_launches", "eager_launches", "bytes", "hbm_bytes", "flops",
                "syncs", "launches_ms", "bytes_ms", "flops_ms", "table_min", "l2_table_min",
                "serial_ms", "serial_table_min"):
        row[key] = sum(share * r[key] for share, r in parts)
    for key in ("launches", "graph_launches", "eager_launches", "syncs"):
        row[key] = round(row[key])
    steps = TABLES[row["dataset"]]
    row["model_steps_per_s"] = steps / row["table_min"] / 60
    row["l2_model_steps_per_s"] = steps / row["l2_table_min"] / 60
    row["serial_model_steps_per_s"] = steps / row["serial_table_min"] / 60
    return row


def training_step(module: Any, optimizer: Any, schedule: Any, gather: Callable[[], Any]) -> Any:
    """One step as the engine and Lightning's automatic optimization with bf16-mixed run it."""
    batch = gather()
    module.on_train_batch_start(batch, 0)
    optimizer.zero_grad()
    with torch.autocast("cpu", torch.bfloat16):
        loss = module.training_step(batch, 0)
    loss.backward()
    module.configure_gradient_clipping(optimizer, 5.0, "norm")
    optimizer.step()
    schedule.step()
    return batch


def batch_size_of(name: str, args: argparse.Namespace) -> int:
    """The dataset's training batch size, scaled by ``--batch-scale``."""
    return max(2, round(DATASETS[name][0] * args.batch_scale))


def measure(name: str, store: GridGraphs, seeds: list[int] | None,
            args: argparse.Namespace, length: int | None = None) -> dict[str, Any]:
    """One path's counts and bounds at one padded length (a fresh compile)."""
    batch_size = batch_size_of(name, args)
    gen = np.random.default_rng(0)
    with (InductorRecorder(cuda_fusion=not args.cpu_fusion) as recorder, cuda_autocast(),
          cuda_attention()):
        module, optimizer, schedule = build(name, seeds, args)
        _fit_start(module)
        pad_to = int(store.lengths()[-1]) if args.train_length == "longest" else None
        gather = batches(store, batch_size, len(seeds) if seeds else None, gen, length, pad_to,
                         args.train_tokens)
        graph = gather().sequence_graph
        if graph is not None and row_attention_applies(graph.shape[-1]):
            # the bias pairs its kernels move, in bf16
            _roofline.PAIR_SHARE = PairShare.of(graph, model_config(name, args).num_heads, 2)
        pairs = _roofline.PAIR_SHARE
        with cuda_gather():  # the step's gather; the model's construction gathers eagerly
            counts = _counted(recorder, lambda: training_step(module, optimizer, schedule,
                                                              gather))
        stats_batch = batches(store, min(batch_size, EVAL_BATCH), None, gen)()
        stats = _counted(recorder, lambda: _statistics_pass(module, stats_batch))
        val = _counted(recorder, lambda: _validation_batch(module, stats_batch))
    graphed = args.compile == "reduce-overhead"
    launch = counts["graph_launches"] * H100["graphed_launch_s" if graphed else "launch_s"] + \
        counts["eager_launches"] * H100["launch_s"]
    bounds = {"launches": launch, "bytes": counts["bytes"] / H100["bytes_per_s"],
              "flops": counts["flops"] / H100["flops_per_s"]}
    reuse_s = max(launch, counts["hbm_bytes"] / H100["bytes_per_s"], bounds["flops"])
    # kernels run one after another: each takes at least its launch, its bytes or its FLOPs
    kernel_s = H100["graphed_launch_s" if graphed else "launch_s"]
    serial_s = sum(max(kernel_s, t) for t in counts.pop("node_s")) + max(
        counts["eager_launches"] * H100["launch_s"], counts["eager_bytes"] / H100["bytes_per_s"],
        counts.pop("eager_flops") / H100["flops_per_s"])
    binding = max(bounds, key=bounds.get)
    replicas = len(seeds) if seeds else 1
    rate = replicas / bounds[binding]
    return {"dataset": name, "path": f"packed {replicas}" if seeds else "engine",
            "replicas": replicas, "length": int(gather().node_mask.shape[-1]), **counts,
            "launches": counts["graph_launches"] + counts["eager_launches"],
            **{f"{k}_ms": v * 1e3 for k, v in bounds.items()}, "binding": binding,
            "model_steps_per_s": rate, "table_min": TABLES[name] / rate / 60,
            "l2_model_steps_per_s": replicas / reuse_s,
            "l2_table_min": TABLES[name] * reuse_s / replicas / 60,
            "serial_ms": serial_s * 1e3, "serial_model_steps_per_s": replicas / serial_s,
            "serial_table_min": TABLES[name] * serial_s / replicas / 60,
            "stats": stats, "val": val, "bias_pairs": (pairs.read, pairs.write)}


def _counted(recorder: InductorRecorder, work: Any) -> dict[str, int]:
    """Runs ``work`` once to compile, then counts its second run."""
    work()
    before = {id(g): g.calls for g in recorder.graphs}
    compiled = len(recorder.graphs)
    eager = eager_costs(work)
    ran = [(g, g.calls - before.get(id(g), 0)) for g in recorder.graphs]
    return {"graph_launches": sum(c * (g.kernels + g.externs) for g, c in ran),
            "eager_launches": eager.launches, "eager_bytes": eager.bytes,
            "eager_flops": eager.flops,
            "node_s": [t for g, c in ran for t in g.node_s * c],
            "bytes": sum(c * g.bytes for g, c in ran) + eager.bytes,
            "hbm_bytes": sum(c * g.hbm_bytes for g, c in ran) + eager.bytes,
            "flops": sum(c * g.flops for g, c in ran) + eager.flops,
            "syncs": eager.syncs, "recompiles": len(recorder.graphs) - compiled,
            "largest": sorted(((c * b, f"{g.name} {what}") for g, c in ran
                               for b, what in g.largest), reverse=True)}


def _fit_start(module: Any) -> None:
    """The dataset configs' statistics callback at fit start (its norms stop tracking)."""
    trainer = SimpleNamespace(datamodule=SimpleNamespace(statistics_dataloader=list))
    ReestimateGraphTokenStatistics().on_fit_start(trainer, module)


def _statistics_pass(module: Any, batch: Any) -> None:
    """One batch of the graph-token statistics callback, as before a validation."""
    trainer = SimpleNamespace(sanity_checking=False, state=SimpleNamespace(fn="fit"),
                              datamodule=SimpleNamespace(statistics_dataloader=lambda: [batch]))
    ReestimateGraphTokenStatistics(max_graphs=batch.num_graphs).on_validation_start(
        trainer, module)


@torch.no_grad()
def _validation_batch(module: Any, batch: Any) -> None:
    """One validation step (eval mode, autocast), as Lightning's validation loop runs it."""
    module.eval()
    with torch.autocast("cpu", torch.bfloat16):
        module.validation_step(batch, 0)
    module.train()


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--datasets", nargs="+", default=list(TABLES), choices=list(TABLES))
    parser.add_argument("--k", type=int, nargs="+", default=[1, 2, 4, 8],
                        help="packed replica counts (default 1 2 4 8)")
    parser.add_argument("--no-engine", action="store_true",
                        help="packed replicas only, without the single model's path")
    parser.add_argument("--prepared", type=Path, help="prepared splits in DIR/<dataset>/")
    parser.add_argument("--synthetic", type=int, default=4096,
                        help="synthetic molecules per dataset without --prepared")
    parser.add_argument("--layers", type=int, default=12, help="default 12 (Graphormer-slim)")
    parser.add_argument("--batch-scale", type=float, default=1.0,
                        help="scales the batch sizes (256, 128), for smoke runs")
    parser.add_argument("--compile", default=preset_compile_mode(),
                        help="torch.compile mode (default: the gpu_fast preset's)")
    parser.add_argument("--top", type=int, default=0,
                        help="also print the N scheduled kernels of a step moving most bytes")
    parser.add_argument("--train-length", choices=["bucketed", "longest"],
                        default=preset_train_length(),
                        help="training batches' padding (default: the gpu_fast preset's)")
    parser.add_argument("--train-tokens", choices=["grid", "rows", "sequences"],
                        default=preset_train_tokens(),
                        help="training batches' tokens (default: the gpu_fast preset's)")
    parser.add_argument("--one-length", action="store_true",
                        help="one random batch's padded length, not the mix of lengths")
    parser.add_argument("--min-share", type=float, default=0.02,
                        help="padded lengths taken by fewer steps are left out (default 0.02)")
    parser.add_argument("--cpu-fusion", action="store_true",
                        help="fuse with inductor's CPU rules instead of its CUDA rules")
    args = parser.parse_args(argv)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    rows = []
    for name in args.datasets:
        graphs = (load_graphs(args.prepared / name / "train.npz") if args.prepared
                  else synthetic(name, args.synthetic))
        store = GridGraphs(graphs, multi_hop_max_dist=HOPS[name])
        paths = [] if args.no_engine else [None]
        for seeds in [*paths, *[list(range(k)) for k in args.k]]:
            one = args.one_length or args.train_length == "longest"
            mix = {None: 1.0} if one else length_mix(
                store, batch_size_of(name, args), len(seeds or [0]), args.min_share)
            parts = []
            for length, share in mix.items():
                parts.append((share, measure(name, store, seeds, args, length)))
                if len(mix) > 1:
                    print(f"  {share:6.1%} of steps:", end=" ")
                    print_row(parts[-1][1])
            rows.append(combined(parts))
            print_row(rows[-1])
            for size, what in rows[-1]["largest"][:args.top]:
                print(f"    {size / 1e6:9.1f} MB  {what}", flush=True)
    summary(rows)
    return rows


def print_row(row: dict[str, Any]) -> None:
    """One line per path."""
    stats, val = row["stats"], row["val"]
    print(f"{row['dataset']:12s} {row['path']:9s} L={row['length']!s:>3s} launches "
          f"{row['launches']:5d} (graphs {row['graph_launches']}, eager {row['eager_launches']})"
          f" {row['bytes'] / 1e9:7.2f} GB {row['flops'] / 1e9:8.1f} GFLOP syncs {row['syncs']}"
          f" | bounds ms: launches {row['launches_ms']:.3f} bytes {row['bytes_ms']:.3f} flops "
          f"{row['flops_ms']:.3f} -> {row['model_steps_per_s']:,.0f} model-steps/s, table "
          f"{row['table_min']:.1f} min | with L2 reuse {row['hbm_bytes'] / 1e9:.2f} GB -> "
          f"{row['l2_model_steps_per_s']:,.0f} model-steps/s, table {row['l2_table_min']:.1f} min"
          f" | kernels in turn {row['serial_ms']:.3f} ms -> "
          f"{row['serial_model_steps_per_s']:,.0f} model-steps/s, table "
          f"{row['serial_table_min']:.1f} min"
          f" | stats batch: {stats['graph_launches']}+"
          f"{stats['eager_launches']} launches, {stats['syncs']} syncs | val batch: "
          f"{val['graph_launches']}+{val['eager_launches']} launches, {val['syncs']} syncs"
          + (" | row attention bias moved: read {:.2f}, written {:.2f}".format(
              *row["bias_pairs"]) if row["bias_pairs"][0] < 1 else "")
          + (f" | {row['recompiles']} recompiles" if row["recompiles"] else ""), flush=True)


def summary(rows: list[dict[str, Any]]) -> None:
    """The last line (see the module docstring)."""
    def packed(name: str, k: int | None = None) -> dict[str, Any] | None:
        mine = [r for r in rows if r["dataset"] == name and r["path"] != "engine"]
        if k is not None:
            mine = [r for r in mine if r["replicas"] == k]
        return max(mine, key=lambda r: r["replicas"]) if mine else None

    def launches(k: int) -> str:
        row = packed("zinc_subset", k)
        return str(row["launches"]) if row else "n/a"

    def minutes(name: str, key: str = "table_min") -> str:
        row = packed(name)
        return f"{row[key]:.1f}" if row else "n/a"

    print(f"gpu_roofline launches_k2={launches(2)} launches_k8={launches(8)} "
          f"table_min={minutes('zinc_subset')} molhiv_min={minutes('molhiv')} "
          f"table_min_l2={minutes('zinc_subset', 'l2_table_min')} "
          f"molhiv_min_l2={minutes('molhiv', 'l2_table_min')} "
          f"table_min_serial={minutes('zinc_subset', 'serial_table_min')} "
          f"molhiv_min_serial={minutes('molhiv', 'serial_table_min')}")


if __name__ == "__main__":
    main()
