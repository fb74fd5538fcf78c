r"""Ours vs. Hugging Face transformers' Graphormer on the same molecules and architecture.

Reads SMILES (a CSV with a ``smiles`` column, optionally ``.gz``, or one SMILES a line), keeps the
first ``--limit`` that RDKit accepts, featurizes them with ``ogb.utils.smiles2graph`` and runs
each side in its own child process (so each peak RSS is that side's alone) with ``--threads``
threads. Per side: preprocessing molecules/s, training graphs/s (forward, backward, AdamW;
warm-up steps excluded), inference graphs/s, peak RSS; for ours also the achieved model GFLOP/s
against a ``torch.mm`` of similar shape. The last line printed is::

    vs_hf prep_x=<ours/HF> train_x=<ours/HF> infer_x=<ours/HF> mem_x=<HF peak/our peak>

Example (from the repository root)::

    .venv/bin/python benchmarks/compare_hf.py \\
        --smiles ../shared/data/ZINC/reference/jtvae_smiles/test.txt \\
        --limit 2048 --batch-size 128 --threads 1
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import featurize, save_workload, thread_env

HERE = Path(__file__).resolve().parent
SIDES = {"ours": HERE / "_ours_side.py", "ours_reference": HERE / "_ours_side.py",
         "hf": HERE / "_hf_side.py"}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smiles", type=Path, required=True,
                        help="CSV with a 'smiles' column (.gz ok) or one SMILES a line")
    parser.add_argument("--limit", type=int, default=None,
                        help="use the first N molecules RDKit accepts (default: all)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--passes", type=int, default=1,
                        help="timed training passes over the molecules (default: 1)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="untimed training steps before timing (default: 1)")
    parser.add_argument("--only", choices=sorted(SIDES), default=None,
                        help="run one side only (no vs_hf line)")
    parser.add_argument("--profile", type=int, default=0,
                        help="also profile N of our training steps and print the top operators")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reference", action="store_true",
                        help="also run ours with backend 'reference' (what the CPU backend buys)")
    return parser.parse_args()


def run_side(name: str, graphs_file: Path, workdir: Path, args: argparse.Namespace
             ) -> dict[str, Any] | None:
    """Runs one side in a child process; its result, or ``None`` if the child failed."""
    out = workdir / f"{name}.json"
    command = [sys.executable, str(SIDES[name]), "--graphs", str(graphs_file), "--out", str(out),
               "--batch-size", str(args.batch_size), "--threads", str(args.threads),
               "--passes", str(args.passes), "--warmup", str(args.warmup),
               "--profile", str(args.profile if name == "ours" else 0), "--seed", str(args.seed),
               "--backend", "reference" if name == "ours_reference" else "auto"]
    done = subprocess.run(command, env=thread_env(args.threads), check=False)
    if done.returncode != 0 or not out.exists():
        # -9 is the kernel's OOM killer, which is how HF ends on large disconnected molecules
        print(f"[{name}] FAILED with exit status {done.returncode}", flush=True)
        return None
    return json.loads(out.read_text())


def describe(name: str, r: dict[str, Any]) -> list[str]:
    """Human-readable figures of one side."""
    prep = ", ".join(f"{k} {v:.2f} s" for k, v in r["prep"].items() if k != "total")
    lines = [
        f"[{name}] prep   {r['prep_mol_per_s']:9.1f} mol/s    ({r['molecules']} molecules in "
        f"{r['prep']['total']:.2f} s: {prep})",
    ]
    for phase in ("train", "infer"):
        t = r[phase]
        lines.append(
            f"[{name}] {phase:6} {t['graphs_per_s']:9.1f} graphs/s ({t['graphs']} graphs, "
            f"{t['steps']} steps in {t['seconds']:.2f} s; collate outside the timer "
            f"{t['collate_seconds']:.2f} s)")
    for phase in ("train_dataset_order", "infer_dataset_order"):
        if phase in r:
            lines.append(f"[{name}] {phase}: {r[phase]['graphs_per_s']:.1f} graphs/s "
                         "(consecutive molecules)")
    lines.append(f"[{name}] peak RSS {r['peak_rss_bytes'] / 2**30:.2f} GiB "
                 f"({r['setup_rss_bytes'] / 2**30:.2f} GiB of it before preprocessing: "
                 "imports, model, optimizer, raw graphs)")
    if "flops" in r:
        f = r["flops"]
        train, infer = f["train_matmul_gflops"], f["infer_matmul_gflops"]
        lines.append(
            f"[{name}] model GFLOP/s: train {f['train_gflops']:.2f}, infer {f['infer_gflops']:.2f};"
            f" torch.mm [B*L (mean {f['matmul_rows']}), 80] x [80, 240] between the steps: "
            f"{train:.2f} in training, {infer:.2f} in inference -> train "
            f"{f['train_gflops'] / train:.0%}, infer {f['infer_gflops'] / infer:.0%} of the matmul")
    return lines


def ratio(numerator: float | None, denominator: float | None) -> str:
    """``numerator / denominator`` to two decimals, ``n/a`` when either side failed."""
    if numerator is None or denominator is None:
        return "n/a"
    return f"{numerator / denominator:.2f}"


def vs_hf_line(ours: dict[str, Any] | None, hf: dict[str, Any] | None) -> str:
    """The one-line summary: speed-ups of ours over HF and HF's memory over ours."""
    def get(r: dict[str, Any] | None, *keys: str) -> float | None:
        for key in keys:
            if r is None:
                return None
            r = r[key]
        return r  # type: ignore[return-value]

    def speedup(*keys: str) -> str:
        return ratio(get(ours, *keys), get(hf, *keys))

    return (f"vs_hf prep_x={speedup('prep_mol_per_s')} train_x={speedup('train', 'graphs_per_s')}"
            f" infer_x={speedup('infer', 'graphs_per_s')}"
            f" mem_x={ratio(get(hf, 'peak_rss_bytes'), get(ours, 'peak_rss_bytes'))}")


def main() -> None:
    args = parse_args()
    graphs, skipped = featurize(args.smiles, args.limit, args.seed)
    for row, smiles in skipped:
        print(f"skipped row {row}: RDKit rejects {smiles!r}")
    if not graphs:
        raise SystemExit(f"no usable molecules in {args.smiles}")
    atoms = sum(g["num_nodes"] for g in graphs)
    print(f"{len(graphs)} molecules ({atoms / len(graphs):.1f} atoms on average), "
          f"batch {args.batch_size}, {args.threads} thread(s), {args.passes} timed pass(es), "
          f"{args.warmup} warm-up step(s)", flush=True)
    results: dict[str, dict[str, Any] | None] = {}
    with tempfile.TemporaryDirectory(prefix="compare_hf_") as tmp:
        graphs_file = Path(tmp) / "graphs.pkl"
        save_workload(graphs_file, graphs)
        del graphs  # the parent's memory is no side's
        names = ["ours", "hf"] + (["ours_reference"] if args.reference else [])
        for name in [args.only] if args.only else names:
            results[name] = run_side(name, graphs_file, Path(tmp), args)
    for name, result in results.items():
        if result is not None:
            print("\n".join(describe(name, result)))
    if not args.only:
        print(vs_hf_line(results["ours"], results["hf"]))
    if args.reference and not args.only:
        print("reference backend: " + vs_hf_line(results["ours_reference"], results["hf"]))


if __name__ == "__main__":
    main()
