r"""What resuming costs: a plan run in one campaign command against the same plan cut in many.

Runs the rehearsal's plan (``tests/campaign/conftest.py``: a packed fit of two seeds, an unpacked
one and a one-seed packed MolHIV fit; tiny model, the GPU preset on the CPU; ``--steps`` steps
each) on tiny prepared splits, once whole and once cut every ``--chunk`` steps, each part a new
process, and prints: commands, chunks per job, wall seconds of each way and the overhead per
resume, whether the results agree, and the size of a packed job's resume point at
Graphormer-slim's size (``--slim``: K=4, MolHIV's feature dims; weights and AdamW moments,
built, not trained).

    python benchmarks/campaign_resume.py --steps 30 --chunk 5
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "campaign"))
from conftest import TINY_ARGS, write_plan  # noqa: E402

from graphormer_sepnorm.campaign.state import split_checkpoint  # noqa: E402
from graphormer_sepnorm.experiment import read_rows  # noqa: E402


def prepare(folder: Path) -> Path:
    """Tiny prepared splits of ZINC-subset and MolHIV (as the tests make them)."""
    import os

    from tiny_data import write_ogb_molhiv, write_zinc_raw

    from graphormer_sepnorm.datasets import MolHIVDataModule, ZINCDataModule
    from graphormer_sepnorm.datasets.prepared import write_prepared

    write_zinc_raw(folder / "mirror" / "ZINC" / "raw")
    write_ogb_molhiv(folder / "mirror" / "ogbg_molhiv")
    os.environ["GRAPHORMER_SEPNORM_DATA_MIRROR"] = str(folder / "mirror")
    root = str(folder / "raw")
    write_prepared(ZINCDataModule(subset=True, root=root), folder / "prepared" / "zinc_subset")
    write_prepared(MolHIVDataModule(root=root), folder / "prepared" / "molhiv")
    return folder / "prepared"


def campaign(plan: Path, state: Path, prepared: Path, *extra: str) -> tuple[int, float]:
    """One campaign command in its own process: exit status and wall seconds."""
    started = time.perf_counter()
    status = subprocess.run([sys.executable, "-m", "graphormer_sepnorm.campaign", str(plan),
                             str(state), "--budget-s", "3600", "--prepared", str(prepared),
                             "--accelerator", "cpu", *extra], cwd=REPO,
                            capture_output=True).returncode
    return status, time.perf_counter() - started


def slim_resume_point_mib(replicas: int = 4) -> tuple[float, float]:
    """MiB of a packed Graphormer-slim resume point: one replica's file, and all files."""
    from graphormer_sepnorm.training.packed_module import PackedGraphormerModule

    info = {"task": "binary", "target_names": ["y"], "atom_feature_dims": [119, 5, 12, 12, 10,
            6, 6, 2, 2], "edge_feature_dims": [5, 6, 2]}
    module = PackedGraphormerModule(dataset_info=info, seeds=list(range(replicas)))
    params = dict(module.named_parameters())
    state = {i: {"step": torch.tensor(1.0), "exp_avg": torch.zeros_like(p),
                 "exp_avg_sq": torch.zeros_like(p)} for i, p in enumerate(params.values())}
    ckpt = {"state_dict": module.state_dict(), "global_step": 1,
            "optimizer_states": [{"state": state, "param_groups": []}]}
    meta, parts = split_checkpoint(ckpt, replicas)
    with tempfile.TemporaryDirectory() as tmp:
        sizes = []
        for k, obj in enumerate([meta, *parts]):
            torch.save(obj, Path(tmp) / f"{k}.pt")
            sizes.append((Path(tmp) / f"{k}.pt").stat().st_size / 2**20)
    return sizes[1], sum(sizes)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="steps per job (default 30)")
    parser.add_argument("--chunk", type=int, default=5, help="steps per command (default 5)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        prepared = prepare(folder)
        plan = write_plan(folder / "plan.yaml")
        data = yaml.safe_load(plan.read_text())
        tiny = list(TINY_ARGS)
        for flag in ("--trainer.max_steps", "--model.total_steps"):
            tiny[tiny.index(flag) + 1] = str(args.steps)
        data["defaults"]["args"] = tiny
        plan.write_text(yaml.safe_dump(data))
        _, whole_s = campaign(plan, folder / "whole", prepared)
        commands, cut_s, status = 0, 0.0, 3
        while status == 3 and commands < 500:
            status, seconds = campaign(plan, folder / "cut", prepared, "--budget-steps",
                                       str(args.chunk), "--min-start-s", "0")
            commands, cut_s = commands + 1, cut_s + seconds
        whole, cut = read_rows(folder / "whole" / "results.csv"), read_rows(
            folder / "cut" / "results.csv")
    same = [(a["best_step"], a["best_val"], a["test_value"]) ==
            (b["best_step"], b["best_val"], b["test_value"]) for a, b in zip(whole, cut,
                                                                             strict=True)]
    chunks = [int(r["chunks"]) for r in cut]
    resumes = sum(chunks) - len(chunks)
    one, total = slim_resume_point_mib()
    print(f"whole: 1 command, {whole_s:.1f} s; cut every {args.chunk} steps: {commands} "
          f"commands, chunks per run {chunks}, {cut_s:.1f} s; overhead "
          f"{(cut_s - whole_s) / max(resumes, 1):.1f} s per resume ({resumes} resumes); "
          f"results identical: {all(same)}")
    print(f"campaign_resume commands={commands} resumes={resumes} overhead_s="
          f"{(cut_s - whole_s) / max(resumes, 1):.2f} identical={all(same)} "
          f"slim_k4_replica_mib={one:.2f} slim_k4_resume_mib={total:.2f}")


if __name__ == "__main__":
    main()
