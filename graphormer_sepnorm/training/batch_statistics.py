"""Population statistics for SepNorm's graph-token BatchNorm, re-estimated without dropout.

Training's running averages follow the last batches, seen through dropout, which evaluation does
not apply (the "variance shift", Li et al., CVPR 2019); re-estimated over training graphs in
eval mode they lowered every measured checkpoint's test MAE (``docs/results/training_fixes.md``).
Only the running statistics change. Also here: the refusal of size-grouped training batches.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch import nn

from graphormer_sepnorm.data.batch import GraphormerBatch
from graphormer_sepnorm.nn.model import Graphormer
from graphormer_sepnorm.nn.sepnorm import GraphTokenBatchNorm
from graphormer_sepnorm.training.packed import PackedReplicas


@torch.no_grad()
def reestimate_graph_token_statistics(model: Graphormer | PackedReplicas,
                                      batches: Iterable[GraphormerBatch],
                                      max_graphs: int | None = None) -> int:
    """Sets every graph-token BatchNorm's running statistics to the mean over ``batches``.

    As ``torch.optim.swa_utils.update_bn``: the statistics are reset and averaged cumulatively
    (momentum ``None``) while the rest of the model runs in eval mode, eagerly, on its own
    backend. Under DDP each batch's statistics are the global batch's; packed replicas are
    re-estimated together, each on every batch.

    Args:
        model: the model or packed replicas; batches are moved to its device.
        batches: training batches (one for all replicas).
        max_graphs: stop once this many graphs were seen (per process). Default: all.

    Returns:
        The number of graphs seen (per process); 0, and nothing changed, without such norms.
    """
    found = graph_token_norms(model)
    if not found:
        return 0
    names, norms = list(found), list(found.values())
    training, momenta = model.training, [norm.momentum for norm in norms]
    model.eval()
    _reset_statistics(model, names)
    for norm in norms:
        norm.momentum = None
        norm.train()
    count, device = 0, next(model.parameters()).device
    try:
        # its batches' shapes vary: compiling each costs more than it saves
        with torch.compiler.set_stance("force_eager"):
            for batch in batches:
                model(batch.to(device))
                count += batch.num_graphs
                if max_graphs is not None and count >= max_graphs:
                    break
    finally:
        for norm, momentum in zip(norms, momenta, strict=True):
            norm.momentum = momentum
        model.train(training)
    return count


def graph_token_norms(model: Graphormer | PackedReplicas) -> dict[str, GraphTokenBatchNorm]:
    """``model``'s graph-token BatchNorms by name (packed replicas: their skeleton's)."""
    modules = model.skeleton if isinstance(model, PackedReplicas) else model
    return {n: m for n, m in modules.named_modules() if isinstance(m, GraphTokenBatchNorm)}


def _reset_statistics(model: Graphormer | PackedReplicas, names: list[str]) -> None:
    """``reset_running_stats`` of the norms ``names`` (of every replica)."""
    if not isinstance(model, PackedReplicas):
        for name in names:
            model.get_submodule(name).reset_running_stats()
        return
    for name in names:
        model.stacked_buffer(f"{name}.running_mean").zero_()
        model.stacked_buffer(f"{name}.running_var").fill_(1)
        model.stacked_buffer(f"{name}.num_batches_tracked").zero_()


class ReestimateGraphTokenStatistics(Callback):
    """Before each validation, re-estimates the graph-token BatchNorm statistics.

    Over up to ``max_graphs`` training graphs from the datamodule's ``statistics_dataloader``
    (one forward pass over them per validation), so the model validated and saved evaluates
    with them; training batches then leave the statistics alone
    (:class:`~graphormer_sepnorm.nn.sepnorm.GraphTokenBatchNorm`'s ``tracks_in_training``).
    Nothing for models without the BatchNorm, or datamodules without that loader.

    Args:
        max_graphs: training graphs per estimate (per process); ``None``: the module's
            ``statistics_graphs`` hyperparameter (default), 0: no re-estimation.
    """

    def __init__(self, max_graphs: int | None = None) -> None:
        self.max_graphs = max_graphs

    def _graphs(self, pl_module: LightningModule) -> int:
        if self.max_graphs is not None:
            return self.max_graphs
        return int(pl_module.hparams.get("statistics_graphs", 0))

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Training batches stop updating the running statistics, if they are re-estimated."""
        if getattr(trainer.datamodule, "statistics_dataloader", None) is not None and \
                self._graphs(pl_module):
            _set_tracking(pl_module, False)

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Training batches update them again (outside this callback's fits)."""
        _set_tracking(pl_module, True)

    def on_exception(self, trainer: Trainer, pl_module: LightningModule,
                     exception: BaseException) -> None:
        """As :meth:`on_fit_end`."""
        _set_tracking(pl_module, True)

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Re-estimates, unless in the sanity check or outside a fit."""
        batches = getattr(trainer.datamodule, "statistics_dataloader", None)
        graphs = self._graphs(pl_module)
        if trainer.sanity_checking or trainer.state.fn != "fit" or batches is None or not graphs:
            return
        model = getattr(pl_module, "model", None)
        if isinstance(model, Graphormer | PackedReplicas):
            reestimate_graph_token_statistics(model, batches(), graphs)


def _set_tracking(pl_module: LightningModule, tracks: bool) -> None:
    """Sets ``tracks_in_training`` of every graph-token BatchNorm of ``pl_module.model``."""
    model = getattr(pl_module, "model", None)
    if isinstance(model, Graphormer | PackedReplicas):
        for norm in graph_token_norms(model).values():
            norm.tracks_in_training = tracks


def refuse_size_grouped_batch_norm(model: nn.Module, datamodule: Any) -> None:
    """Raises when a model with batch statistics would train on size-grouped batches."""
    if getattr(datamodule, "train_batches", "random") != "size_grouped":
        return
    modules = model.skeleton if isinstance(model, PackedReplicas) else model
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in modules.modules()):
        raise ValueError(
            "train_batches='size_grouped' with a model that normalizes with batch statistics "
            "(SepNorm's BatchNorm): each training batch would hold molecules of nearly one size "
            "and the BatchNorm would subtract what size explains. Use --data.train_batches random "
            "(the default), or a model without BatchNorm (--model.config.sepnorm false).")
