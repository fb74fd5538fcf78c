r"""What uniform random training batches cost against size-grouped ones, per CPU training step.

Size-grouped batches (pools of 50 batches sorted by molecule size) bias SepNorm's batch
statistics, so training batches are uniform random samples by default; random batches are padded
to their largest molecule. Both orders run here in one process on the same molecules with the
same model, alternating batch by batch (the machine's speed drifts in phases), and the script
prints seconds per step and padded tokens per batch for each.

Example (from the repository root)::

    .venv/bin/python benchmarks/batch_order.py \\
        --smiles ../shared/data/ZINC/smiles/subset_test.csv --limit 2048 --batch-size 128
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from _common import featurize
from _ours_side import to_data, train_step
from ab_steps import compare

from graphormer_sepnorm import Graphormer, GraphormerCollator, GraphormerConfig, add_shortest_paths
from graphormer_sepnorm.data import SizeGroupedBatchSampler


def padding(batches: list[list[int]], sizes: list[int]) -> tuple[float, float]:
    """Mean padded tokens ``B * (1 + N_max)`` per batch and the share of them that are real."""
    padded = sum(len(b) * (1 + max(sizes[i] for i in b)) for b in batches)
    real = sum(len(b) + sum(sizes[i] for i in b) for b in batches)
    return padded / len(batches), real / padded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smiles", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=1, help="passes over the batches")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=80, help="hidden and FFN size")
    parser.add_argument("--hops", type=int, default=20, help="multi_hop_max_dist")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims

    graphs, _ = featurize(args.smiles, args.limit)
    data = add_shortest_paths([to_data(g) for g in graphs])
    sizes = [d.num_nodes for d in data]
    collate = GraphormerCollator(multi_hop_max_dist=args.hops)
    sides = {}
    for name, pool in (("size_grouped", 50), ("random", 1)):
        batches = list(SizeGroupedBatchSampler(sizes, args.batch_size, pool_batches=pool))
        torch.manual_seed(0)
        model = Graphormer(GraphormerConfig(
            get_atom_feature_dims(), get_bond_feature_dims(), num_tasks=1,
            num_layers=args.layers, hidden_dim=args.hidden, ffn_dim=args.hidden,
            multi_hop_max_dist=args.hops))
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, fused=True)
        sides[name] = (model, optimizer, [collate([data[i] for i in b]) for b in batches])
        tokens, real = padding(batches, sizes)
        print(f"{name}: {len(batches)} batches, {tokens:.0f} padded tokens per batch, "
              f"{100 * real:.0f}% of them real", flush=True)
    seconds = compare(sides, train_step, args.rounds)
    steps = args.rounds * len(sides["random"][2])
    a, b = seconds["size_grouped"] / steps, seconds["random"] / steps
    print(f"train step: size_grouped {1000 * a:.1f} ms, random {1000 * b:.1f} ms, "
          f"random/size_grouped {b / a:.3f}")


if __name__ == "__main__":
    main()
