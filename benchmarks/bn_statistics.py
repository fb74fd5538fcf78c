"""Test MAE of fine-tuned checkpoints with re-estimated graph-token BatchNorm statistics.

A fine-tuned model evaluates with running statistics that an exponential average (momentum 0.1)
gathered over its last training steps, through dropout. For each best checkpoint of
``benchmarks/small_data.py``'s runs, this compares the test MAE with those statistics against
the test MAE with statistics re-estimated over the whole training split without dropout
(:func:`~graphormer_sepnorm.training.batch_statistics.reestimate_graph_token_statistics`,
weights untouched), and prints the step the checkpoint was taken at.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bn_statistics.py runs/small_data/*/pre_b/seed*
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import torch
import yaml

from graphormer_sepnorm.datasets import SmilesCSVDataModule
from graphormer_sepnorm.training.batch_statistics import reestimate_graph_token_statistics
from graphormer_sepnorm.training.module import GraphormerModule


def datamodule(run_dir: Path) -> SmilesCSVDataModule:
    """The run's data, as its config has it."""
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    init = dict(config["data"]["init_args"])
    module = SmilesCSVDataModule(**{k: v for k, v in init.items() if k != "multi_hop_max_dist"},
                                 multi_hop_max_dist=config["model"]["config"]["multi_hop_max_dist"])
    module.setup("fit")
    return module


@torch.no_grad()
def test_mae(module: GraphormerModule, data: SmilesCSVDataModule) -> float:
    """Mean absolute error over the test split, in the targets' units."""
    module.eval()
    errors = [(module(b) - b.y).abs() for b in data.test_dataloader()]
    return float(torch.cat(errors).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders with checkpoints/best-*")
    args = parser.parse_args()
    print("run | step | test MAE, running | re-estimated | change")
    for run_dir in args.runs:
        best = next(iter(sorted((run_dir / "checkpoints").glob("best-*.ckpt"))), None)
        if best is None:
            continue
        data = datamodule(run_dir)
        module = GraphormerModule.load_from_checkpoint(best, weights_only=True)
        before = test_mae(module, data)
        reestimate_graph_token_statistics(module.model, data.train_dataloader())
        after = test_mae(module, data)
        step = re.search(r"step=(\d+)", best.name).group(1)
        print(f"{run_dir} | {step} | {before:.4f} | {after:.4f} | {after / before - 1:+.1%}",
              flush=True)


if __name__ == "__main__":
    main()
