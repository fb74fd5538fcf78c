"""The Hugging Face transformers 4.40.2 Graphormer side, run in its own process.

Follows HF's documented recipe: ``preprocess_item`` on every molecule (Cython Floyd-Warshall and
edge-path generation), then ``GraphormerDataCollator`` on consecutive batches in dataset order,
and ``GraphormerForGraphClassification`` with ``num_classes=1`` (MSE regression).
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import torch
from _common import Graph, chunks, load_workload, measure, set_mode, worker_args, write_result


def hf_config(num_layers: int = 12, hidden: int = 80, ffn: int = 80, heads: int = 8) -> Any:
    """The same architecture as ours: pre-LN, 12 x 80, FFN 80, 8 heads, dropouts 0.1."""
    from transformers import GraphormerConfig

    return GraphormerConfig(
        num_classes=1, num_hidden_layers=num_layers, embedding_dim=hidden,
        ffn_embedding_dim=ffn, num_attention_heads=heads, dropout=0.1, attention_dropout=0.1,
        activation_dropout=0.1, multi_hop_max_dist=20, edge_type="multi_hop",
        pre_layernorm=True,
    )


def to_item(graph: Graph) -> dict[str, Any]:
    """HF's item layout (as its OGB datasets on the Hub): ``edge_attr`` instead of ``edge_feat``."""
    return {"edge_index": graph["edge_index"], "edge_attr": graph["edge_feat"],
            "node_feat": graph["node_feat"], "num_nodes": graph["num_nodes"], "y": graph["y"]}


class HFSide:
    """HF's Graphormer with its own collator, batches in dataset order.

    Args:
        batch_size: graphs per batch.
        seed: seed of the model initialization.
    """

    def __init__(self, batch_size: int, seed: int) -> None:
        with warnings.catch_warnings():  # pyximport's Cython language_level notice
            warnings.simplefilter("ignore")
            from transformers import GraphormerForGraphClassification
            from transformers.models.graphormer.collating_graphormer import (
                GraphormerDataCollator,
                preprocess_item,
            )
        torch.manual_seed(seed)
        self.preprocess_item = preprocess_item
        self.collator = GraphormerDataCollator()  # HF default spatial_pos_max=20
        self.model = GraphormerForGraphClassification(hf_config())
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=2e-4, weight_decay=0.01,
                                           fused=True)
        self.batch_size = batch_size
        self.items: list[dict[str, Any]] = []

    def prepare(self, graphs: list[Graph]) -> dict[str, float]:
        """``preprocess_item`` on every molecule, then the collator on every batch."""
        raw = [to_item(g) for g in graphs]  # dict renaming only: not timed
        start = time.perf_counter()
        self.items = [self.preprocess_item(item) for item in raw]
        processed = time.perf_counter()
        for indices in self.batches(0):
            self.collate(indices)  # each batch is dropped at once: HF's batches are huge
        end = time.perf_counter()
        return {"preprocess_item": processed - start, "collate": end - processed,
                "total": end - start}

    def batches(self, epoch: int) -> list[list[int]]:
        """Consecutive batches in dataset order (HF's Trainer without grouping)."""
        return chunks(len(self.items), self.batch_size)

    def collate(self, indices: list[int]) -> dict[str, torch.Tensor]:
        """HF's collator; it replaces arrays by tensors in the items, so it gets shallow copies."""
        return self.collator([dict(self.items[i]) for i in indices])

    def train_step(self, batch: dict[str, torch.Tensor]) -> None:
        """HF's MSE loss (``num_classes=1``), backward, AdamW step."""
        set_mode(self.model, True)
        loss = self.model(**batch).loss
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()

    def infer_step(self, batch: dict[str, torch.Tensor]) -> None:
        """Eval-mode forward without gradients (no labels, so no loss)."""
        set_mode(self.model, False)
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        with torch.no_grad():
            self.model(**inputs)


def main() -> None:
    args = worker_args(__doc__)
    torch.set_num_threads(args.threads)
    side = HFSide(args.batch_size, args.seed)
    result, _, _ = measure(side, load_workload(args.graphs)["graphs"], args)
    write_result(args.out, result)


if __name__ == "__main__":
    main()
