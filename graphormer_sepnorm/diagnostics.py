"""Geometry of graph-token embeddings (SepNorm's claim: less collapse than under ShareNorm).

Spectrum, effective rank and uniformity of any ``[n, d]`` set of embeddings, and a callback
that logs them after each validation.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from lightning.pytorch import Callback, LightningModule, Trainer
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle


def singular_values(embeddings: Tensor, center: bool = False) -> Tensor:
    """Singular values of an ``[n, d]`` embedding matrix, in decreasing order.

    Args:
        embeddings: ``[n, d]``.
        center: subtract the mean embedding first (the spectrum of the covariance, up to
            scale). Default: false.

    Returns:
        ``[min(n, d)]`` float64.
    """
    z = embeddings.detach().double()
    if center:
        z = z - z.mean(0, keepdim=True)
    return torch.linalg.svdvals(z)


def effective_rank(embeddings: Tensor, center: bool = False) -> float:
    """``exp`` of the entropy of the normalized singular values (Roy and Vetterli, 2007).

    ``k`` for ``k`` orthogonal directions of equal strength, 1 for identical embeddings.

    Args:
        embeddings: ``[n, d]``.
        center: see :func:`singular_values`. Default: false.

    Returns:
        The effective rank; 0.0 for an all-zero matrix.
    """
    s = singular_values(embeddings, center)
    total = s.sum()
    if total <= 0:
        return 0.0
    p = s / total
    p = p[p > 0]
    return math.exp(float(-(p * p.log()).sum()))


def uniformity(embeddings: Tensor, t: float = 2.0) -> float:
    """``log mean_{i != j} exp(-t ||z_i - z_j||^2)`` of L2-normalized embeddings.

    Wang and Isola (2020): lower is more uniform; two antipodal points give ``-4t``, identical 0.

    Args:
        embeddings: ``[n, d]`` with ``n >= 2``.
        t: temperature. Default: 2.

    Returns:
        The uniformity loss.
    """
    if embeddings.shape[0] < 2:
        raise ValueError("uniformity needs at least two embeddings")
    z = F.normalize(embeddings.detach().double(), dim=1)
    sq_dist = torch.pdist(z).pow(2)
    return float(torch.logsumexp(-t * sq_dist, 0) - math.log(len(sq_dist)))


class GraphTokenDiagnostics(Callback):
    """Logs ``val/cls_effective_rank`` and ``val/cls_uniformity`` after each validation epoch.

    Over up to ``max_graphs`` validation graphs per process, gathered under DDP. The embeddings
    are read off the validation step's input of the model's ``head`` (else ``model.embed`` is
    run). Nothing is logged for packed replicas, which have no single embedding.

    Args:
        max_graphs: embeddings kept per process. Default: 4096.
        model_attr: the LightningModule's attribute holding the model. Default: ``'model'``.
        center: see :func:`singular_values`; for the effective rank. Default: false.
    """

    def __init__(self, max_graphs: int = 4096, model_attr: str = "model",
                 center: bool = False) -> None:
        self.max_graphs = max_graphs
        self.model_attr = model_attr
        self.center = center
        self._embeddings: list[Tensor] = []
        self._pending: Tensor | None = None
        self._hook: RemovableHandle | None = None

    def _model(self, pl_module: LightningModule) -> nn.Module:
        return getattr(pl_module, self.model_attr)

    def _applies(self, pl_module: LightningModule) -> bool:
        # packed replicas (several models in one) have no single embedding to measure
        return hasattr(self._model(pl_module), "embed")

    def _capture(self, module: nn.Module, args: tuple[object, ...]) -> None:
        if args and isinstance(args[0], Tensor):
            self._pending = args[0].detach()

    def _remove_hook(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def on_validation_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Starts a new collection and listens to the head's input."""
        self._embeddings, self._pending = [], None
        head = getattr(self._model(pl_module), "head", None)
        if isinstance(head, nn.Module) and self._hook is None:
            self._hook = head.register_forward_pre_hook(self._capture)

    def on_validation_batch_end(self, trainer: Trainer, pl_module: LightningModule,
                                outputs: object, batch: object, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        """Keeps the batch's embeddings while fewer than ``max_graphs`` are collected."""
        pending, self._pending = self._pending, None
        if sum(len(e) for e in self._embeddings) >= self.max_graphs or not self._applies(
                pl_module):
            return
        if pending is None or pending.dim() != 2 or len(pending) != batch.num_graphs:
            with torch.no_grad():
                pending = self._model(pl_module).embed(batch)
        # a head with molecule features reads [embedding, mol_x]: keep the embedding
        pending = pending[:, : self._model(pl_module).config.hidden_dim]
        self._embeddings.append(pending.float())

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Logs the two measures of the collected embeddings."""
        self._remove_hook()
        if trainer.sanity_checking or not self._applies(pl_module):
            return
        if self._embeddings:
            z = torch.cat(self._embeddings)[: self.max_graphs]
        else:  # still take part in the gathers below, or the other processes would wait forever
            z = torch.zeros(0, self._model(pl_module).config.hidden_dim, device=pl_module.device)
        # all_gather needs equal shapes: every process keeps the smallest count
        keep = int(pl_module.all_gather(torch.tensor(len(z), device=z.device)).min())
        z = pl_module.all_gather(z[:keep]).reshape(-1, z.shape[-1])
        if len(z) < 2:
            return
        pl_module.log("val/cls_effective_rank", effective_rank(z, self.center), sync_dist=False)
        pl_module.log("val/cls_uniformity", uniformity(z), sync_dist=False)

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Removes the hook if a validation run was interrupted."""
        self._remove_hook()
