"""Throughput and peak memory of ``graphormer-sepnorm-predict`` on a large SMILES file.

Streams the first ``--limit`` rows of ``--smiles`` through
:func:`graphormer_sepnorm.prediction.runner.predict_file` (the CLI's code path: chunked
reading, featurization, size-sorted batches, CSV written as it goes) and prints molecules per
second and the peak RSS of the main process and of the featurization workers. Without
``--checkpoint`` it predicts with a freshly initialized Graphormer-slim ZINC model (12 layers,
hidden 80, 8 heads), so it needs no bundled model.

``--breakdown`` instead times each stage of prediction in this process, one thread, on the
first ``--limit`` SMILES (thread CPU ms a molecule): parsing, the graph's atom and bond
features, the RDKit descriptors, the Morgan counts, shortest paths and collation into
size-sorted batches, the network, and the GP blend (its mean and deviations).

Example::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/predict_throughput.py --limit 20000
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/predict_throughput.py --breakdown \
        --checkpoint runs/solubility/seed0/checkpoints/best.ckpt --limit 2000
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from graphormer_sepnorm.checkpoints import stamp
from graphormer_sepnorm.chem.featurizers import ZincFeaturizer
from graphormer_sepnorm.nn import GraphormerConfig
from graphormer_sepnorm.prediction.runner import predict_file
from graphormer_sepnorm.training.module import GraphormerModule

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SMILES = ROOT.parent / "shared/data/ZINC/reference/jtvae_smiles/train.txt"


def slim_zinc_checkpoint(path: Path) -> Path:
    """Saves a freshly initialized Graphormer-slim ZINC model (as configs/zinc.yaml)."""
    featurizer = ZincFeaturizer()
    info = {"name": "zinc", "task": "regression", "target_names": ["penalized_logp"],
            "atom_feature_dims": featurizer.atom_feature_dims,
            "edge_feature_dims": featurizer.edge_feature_dims,
            "featurizer": featurizer.to_config()}
    config = GraphormerConfig(num_layers=12, hidden_dim=80, ffn_dim=80, num_heads=8,
                              multi_hop_max_dist=20)
    module = GraphormerModule(dataset_info=info, config=config)
    torch.save(stamp({"state_dict": module.state_dict(),
                      "hyper_parameters": dict(module.hparams)}), path)
    return path


def head(source: Path, limit: int, target: Path) -> int:
    """Copies the first ``limit`` lines of ``source`` to ``target``; returns the count."""
    with open(source) as src, open(target, "w") as out:
        lines = list(itertools.islice(src, limit))
        out.writelines(lines)
    return len(lines)


def peak_rss_mib(who: int) -> float:
    """Peak resident memory (MiB) of this process or of its (reaped) children (Linux: KiB)."""
    return resource.getrusage(who).ru_maxrss / 1024


def cpu_seconds(who: int) -> float:
    """User + system CPU time of this process or of its (reaped) children."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def stage_breakdown(checkpoint: str, smiles: list[str], batch_size: int) -> dict[str, float]:
    """Thread CPU milliseconds a molecule of each stage of prediction (see the docstring)."""
    from graphormer_sepnorm.chem.featurizers import featurize_many
    from graphormer_sepnorm.chem.smiles import parse_smiles
    from graphormer_sepnorm.data.shortest_paths import batched_shortest_paths
    from graphormer_sepnorm.prediction.checkpoints import load_with_blend
    from graphormer_sepnorm.prediction.engine import Predictor

    torch.set_num_threads(1)
    module, blend = load_with_blend(checkpoint)
    predictor = Predictor(module, batch_size, blend=blend)
    featurizer, clock = predictor.featurizer, time.thread_time
    generators = dict(zip(featurizer.mol_features, featurizer._generators, strict=True))
    spent: dict[str, float] = {}

    def timed(name: str, work: Any) -> Any:
        started = clock()
        result = work()
        spent[name] = spent.get(name, 0.0) + clock() - started
        return result

    mols = timed("parse", lambda: [parse_smiles(s) for s in smiles])
    for name, generator in generators.items():
        timed(f"molecule features: {name}", lambda g=generator: [g(m) for m in mols])
    timed("graph (atom and bond features)", lambda: [featurizer._featurize(m) for m in mols])
    arrays = timed("whole featurization", lambda: featurize_many(smiles, featurizer, True)[0])
    good = [a for a in arrays if a is not None]
    timed("shortest paths", lambda: batched_shortest_paths([a.edge_index for a in good],
                                                           [len(a.x) for a in good]))
    prepared = predictor.prepare(smiles)
    batches = timed("collation into size-sorted batches", lambda: list(prepared))
    with torch.inference_mode():
        for _, batch in batches:
            emb = timed("network: graph-token embedding", lambda b=batch: module.model.embed(b))
            preds = timed("network: head", lambda e=emb, b=batch: module.to_predictions(
                module.model.readout(e, b)))
            if blend is not None:
                timed("GP blend (mean and deviation)",
                      lambda p=preds, b=batch: blend.predict(p, b.mol_x))
    return {name: round(1e3 * seconds / len(smiles), 3) for name, seconds in spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", default=None, help="default: fresh Graphormer-slim ZINC")
    parser.add_argument("--smiles", type=Path, default=DEFAULT_SMILES)
    parser.add_argument("--limit", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--chunk-size", type=int, default=4096)
    parser.add_argument("--workers", type=int, default=None,
                        help="featurization processes (default: the CLI's for the checkpoint)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (main)")
    parser.add_argument("--breakdown", action="store_true",
                        help="time each stage in this process instead (needs --checkpoint)")
    args = parser.parse_args()
    if args.breakdown:
        with open(args.smiles) as handle:
            smiles = [line.split()[0] for line in itertools.islice(handle, args.limit)]
        print(json.dumps({"rows": len(smiles), "checkpoint": args.checkpoint,
                          "cpu_ms_per_mol": stage_breakdown(args.checkpoint, smiles,
                                                            args.batch_size)}))
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        checkpoint = args.checkpoint or str(slim_zinc_checkpoint(folder / "slim.ckpt"))
        rows = head(args.smiles, args.limit, folder / "input.smi")
        started = time.perf_counter()
        cpu_main, cpu_workers = cpu_seconds(resource.RUSAGE_SELF), cpu_seconds(
            resource.RUSAGE_CHILDREN)
        summary = predict_file(folder / "input.smi", folder / "out.csv", checkpoint,
                               batch_size=args.batch_size, progress=False,
                               num_workers=args.workers, chunk_size=args.chunk_size)
        seconds = time.perf_counter() - started
        cpu_main = cpu_seconds(resource.RUSAGE_SELF) - cpu_main
        cpu_workers = cpu_seconds(resource.RUSAGE_CHILDREN) - cpu_workers
    result = {
        "rows": rows, "predicted": summary.predicted, "flagged": summary.flagged,
        "seconds": round(seconds, 2), "mol_per_s": round(rows / seconds, 1),
        # CPU time tells what dedicated cores would do when the machine is shared and loaded
        "cpu_s_main": round(cpu_main, 1), "cpu_s_workers": round(cpu_workers, 1),
        "peak_rss_main_mib": round(peak_rss_mib(resource.RUSAGE_SELF), 1),
        "peak_rss_worker_mib": round(peak_rss_mib(resource.RUSAGE_CHILDREN), 1),
        "workers": summary.workers,
        "torch_threads": torch.get_num_threads(), "batch_size": args.batch_size,
        "checkpoint": args.checkpoint or "fresh Graphormer-slim ZINC",
    }
    print(json.dumps(result))
    print(f"{rows} rows in {seconds:.1f} s: {rows / seconds:.0f} mol/s; peak RSS "
          f"{result['peak_rss_main_mib']:.0f} MiB (main), "
          f"{result['peak_rss_worker_mib']:.0f} MiB (largest worker)", file=sys.stderr)


if __name__ == "__main__":
    main()
