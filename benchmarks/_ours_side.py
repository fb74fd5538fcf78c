"""Our side of the HF comparison, run in its own process by ``compare_hf.py``.

Uses only the package's public API: ``add_shortest_paths``, ``GraphormerCollator``,
``SizeGroupedBatchSampler`` and ``Graphormer``. Besides the shared figures it reports the model's
achieved GFLOP/s against a plain ``torch.mm`` of similar shape timed in bursts between the
model's steps (:class:`MatmulProbe`), and the same loops on consecutive molecules in dataset
order, beside the random batches that training draws.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.nn.functional as F
from _common import (
    Graph,
    chunks,
    load_workload,
    loop_summary,
    measure,
    run_loop,
    set_mode,
    tokens_per_batch,
    worker_args,
    write_result,
)
from _flops import MatmulProbe, model_flops
from torch_geometric.data import Data

from graphormer_sepnorm import (
    Graphormer,
    GraphormerBatch,
    GraphormerCollator,
    GraphormerConfig,
    add_shortest_paths,
)
from graphormer_sepnorm.data import SizeGroupedBatchSampler
from graphormer_sepnorm.nn import set_backend
from graphormer_sepnorm.nn.cpu.size_groups import SizeGroups


def to_data(graph: Graph) -> Data:
    """A PyG ``Data`` from an ogb graph dict (no copy of the arrays)."""
    return Data(x=torch.from_numpy(graph["node_feat"]),
                edge_index=torch.from_numpy(graph["edge_index"]),
                edge_attr=torch.from_numpy(graph["edge_feat"]),
                y=torch.tensor([graph["y"]], dtype=torch.float),
                num_nodes=graph["num_nodes"])


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: Any) -> None:
    """MSE on the targets (as HF's regression head), backward, AdamW step."""
    set_mode(model, True)
    loss = F.mse_loss(model(batch), batch.y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def infer_step(model: torch.nn.Module, batch: Any) -> None:
    """Eval-mode forward without gradients."""
    set_mode(model, False)
    with torch.no_grad():
        model(batch)


class OursSide:
    """Our Graphormer (default SepNorm) with uniform random batches, as training draws them.

    Args:
        atom_feature_dims: ogb's ``get_atom_feature_dims()``.
        bond_feature_dims: ogb's ``get_bond_feature_dims()``.
        batch_size: graphs per batch.
        seed: seed of the model initialization and of the sampler.
        backend: :func:`~graphormer_sepnorm.nn.set_backend`'s choice. Default: ``'auto'``.
    """

    def __init__(self, atom_feature_dims: list[int], bond_feature_dims: list[int],
                 batch_size: int, seed: int, backend: str = "auto") -> None:
        torch.manual_seed(seed)
        self.batch_size = batch_size
        self.seed = seed
        self.model = set_backend(Graphormer(GraphormerConfig(atom_feature_dims, bond_feature_dims)),
                                 backend)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=2e-4, weight_decay=0.01,
                                           fused=True)
        self.collator = GraphormerCollator(multi_hop_max_dist=20)
        self.data: list[Data] = []
        self.sizes: list[int] = []
        self.grouped = True  # shuffled random batches (what training uses) or plain dataset order

    def prepare(self, graphs: list[Graph]) -> dict[str, float]:
        """Data objects, shortest paths of all graphs in one call, collate of every batch."""
        start = time.perf_counter()
        self.data = [to_data(g) for g in graphs]
        built = time.perf_counter()
        add_shortest_paths(self.data)
        paths = time.perf_counter()
        self.sizes = [d.num_nodes for d in self.data]
        for indices in self.batches(0):
            self.collate(indices)
        end = time.perf_counter()
        return {"to_data": built - start, "shortest_paths": paths - built,
                "collate": end - paths, "total": end - start}

    def batches(self, epoch: int) -> list[list[int]]:
        """Uniform random batches of epoch ``epoch``, as training draws them (or dataset order)."""
        if not self.grouped:
            return chunks(len(self.data), self.batch_size)
        sampler = SizeGroupedBatchSampler(self.sizes, self.batch_size, shuffle=True,
                                          seed=self.seed)
        sampler.set_epoch(epoch)
        return list(sampler)

    def collate(self, indices: list[int]) -> GraphormerBatch:
        """Our collator on the chosen graphs."""
        return self.collator([self.data[i] for i in indices])

    def train_step(self, batch: GraphormerBatch) -> None:
        """See :func:`train_step`."""
        train_step(self.model, self.optimizer, batch)

    def infer_step(self, batch: GraphormerBatch) -> None:
        """See :func:`infer_step`."""
        infer_step(self.model, batch)

    def shapes(self, batches: list[list[int]]) -> list[tuple[int, int]]:
        """``(B, N)`` of each batch: graphs and padded atom count."""
        return [(len(b), max(self.sizes[i] for i in b)) for b in batches]

    def padded_tokens(self, indices: list[int]) -> int:
        """``B * (1 + N)`` of a batch: its graphs times its padded length."""
        ((graphs, atoms),) = self.shapes([indices])
        return graphs * (1 + atoms)

    def groups(self, indices: list[int]) -> list[tuple[int, int]] | None:
        """``(graphs, tokens)`` of each attention group the model forms for this batch."""
        sizes = torch.tensor([self.sizes[i] for i in indices])
        node_mask = torch.arange(int(sizes.max()))[None, :] < sizes[:, None]
        groups = SizeGroups.plan(node_mask, self.model.layers[0].attention.num_heads)
        return None if groups is None else list(zip(groups.counts, groups.lengths, strict=True))

    def batch_flops(self, batches: list[list[int]]) -> int:
        """Forward FLOPs of the model on these batches (attention per group, as it runs)."""
        return sum(model_flops(len(b), n, groups=self.groups(b))
                   for b, (_, n) in zip(batches, self.shapes(batches), strict=True))


def flops_report(side: OursSide, train: Any, infer: Any, probes: tuple[MatmulProbe, MatmulProbe]
                 ) -> dict[str, float]:
    """Achieved model GFLOP/s in training and inference, and the interleaved matmul references."""
    train_flops = 3 * side.batch_flops(train.batches)  # backward ~ 2x forward
    infer_flops = side.batch_flops(infer.batches)
    return {
        "train_gflops": train_flops / train.seconds / 1e9,
        "infer_gflops": infer_flops / infer.seconds / 1e9,
        "matmul_rows": round(tokens_per_batch(side.shapes(train.batches))),
        "train_matmul_gflops": probes[0].gflops,
        "infer_matmul_gflops": probes[1].gflops,
    }


def profile_training(side: OursSide, steps: int) -> None:
    """Prints the top operators of ``steps`` training steps (torch.profiler, self CPU time)."""
    batches = side.batches(0)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for step in range(steps):
            side.train_step(side.collate(batches[step % len(batches)]))
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25), flush=True)


def main() -> None:
    args = worker_args(__doc__)
    torch.set_num_threads(args.threads)
    workload = load_workload(args.graphs)
    side = OursSide(workload["atom_feature_dims"], workload["bond_feature_dims"],
                    args.batch_size, args.seed, args.backend)
    probes = (MatmulProbe(side.padded_tokens), MatmulProbe(side.padded_tokens))
    result, train, infer = measure(side, workload["graphs"], args, probes)
    result["flops"] = flops_report(side, train, infer, probes)
    side.grouped = False  # the same loops in dataset order (consecutive molecules)
    result["train_dataset_order"] = loop_summary(
        run_loop(side, 1, args.warmup, side.train_step))
    result["infer_dataset_order"] = loop_summary(run_loop(side, 1, 1, side.infer_step))
    side.grouped = True
    if args.profile:
        profile_training(side, args.profile)
    write_result(args.out, result)


if __name__ == "__main__":
    main()
