"""Several replicas of one model trained as one: stacked parameters, one ``vmap``.

Graphormer-slim is small enough that one replica leaves a GPU mostly waiting on kernel
launches. :class:`PackedReplicas` stacks ``R`` models of one architecture (seeds of one recipe)
along a new leading dimension and runs them with ``torch.func.vmap`` over it: every kernel then
does ``R`` replicas' work. Each replica keeps its own parameters, BatchNorm statistics, dropout
draws and batches; AdamW is elementwise, so one AdamW over the stacked parameters steps each
replica exactly as its own AdamW would, and :func:`clip_grad_norm_per_replica` clips each
replica's gradient by its own norm, as ``clip_grad_norm_`` would in a single run.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import fields

import torch
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap

from graphormer_sepnorm.data.collate import GraphormerBatch
from graphormer_sepnorm.nn.attention import BiasedMultiheadAttention
from graphormer_sepnorm.nn.model import Graphormer
from graphormer_sepnorm.nn.node_encoders import FeatureEmbedding


def _key(name: str) -> str:
    return name.replace(".", "__")


class PackedReplicas(nn.Module):
    """``R`` Graphormers of one config, stacked: ``[R, ...]`` parameters and buffers.

    Args:
        models: the replicas (same config); their weights are copied, not shared.

    Shapes:
        a grid-layout :class:`~graphormer_sepnorm.data.collate.GraphormerBatch` whose fields
        have a leading ``R`` (``GridGraphs.batch`` of ``[R, B]`` indices), or one without
        (every replica on the same graphs) -> ``[R, B, num_tasks]``.
    """

    def __init__(self, models: Sequence[Graphormer]) -> None:
        super().__init__()
        if not models or any(m.config != models[0].config for m in models):
            raise ValueError("packed replicas need at least one model, all of one config")
        params, buffers = stack_module_state(list(models))
        self.names = list(params)
        self.buffer_names = list(buffers)
        for name, value in params.items():
            self.register_parameter(_key(name), nn.Parameter(value.detach().clone()))
        transient = _non_persistent_buffers(models[0])
        for name, value in buffers.items():
            self.register_buffer(_key(name), value.clone(), persistent=name not in transient)
        self.persistent_buffer_names = [n for n in self.buffer_names if n not in transient]
        skeleton = copy.deepcopy(models[0]).to("meta")
        skeleton.fast_encode = None  # the reference model: the CPU backend does not vmap
        for module in skeleton.modules():
            if isinstance(module, BiasedMultiheadAttention):
                module.fused = False
            if isinstance(module, FeatureEmbedding):
                module.gather_sums = True  # vmap has no batching rule for embedding_bag
        self._skeleton = [skeleton]  # in a list: not a submodule, no state of its own
        self.num_replicas = len(models)

    @property
    def config(self):
        """The replicas' shared config."""
        return self._skeleton[0].config

    def forward(self, batch: GraphormerBatch) -> Tensor:
        """Each replica's predictions, ``[R, B, T]``.

        Each on its own batch (fields ``[R, ...]``), or all on one (as in evaluation).
        """
        skeleton = self._skeleton[0].train(self.training)
        tensors = {f.name: getattr(batch, f.name) for f in fields(batch)
                   if isinstance(getattr(batch, f.name), Tensor)}
        shared = batch.node_mask.dim() == 2

        def one(params: dict[str, Tensor], buffers: dict[str, Tensor],
                fields_: dict[str, Tensor]) -> Tensor:
            return functional_call(skeleton, (params, buffers), (GraphormerBatch(**fields_),))

        return vmap(one, in_dims=(0, 0, None if shared else 0), randomness="different")(
            self._stacked(self.names, True),
            self._stacked(self.buffer_names, False), tensors)

    def _stacked(self, names: list[str], parameters: bool) -> dict[str, Tensor]:
        # the module's own dicts: no walk of named_parameters() in every step
        source = self._parameters if parameters else self._buffers
        return {name: source[_key(name)] for name in names}

    def replica_state_dict(self, index: int) -> dict[str, Tensor]:
        """Replica ``index``'s weights as a single :class:`Graphormer`'s ``state_dict``."""
        stacked = {**self._stacked(self.names, True),
                   **self._stacked(self.persistent_buffer_names, False)}
        return {name: value[index].detach().clone() for name, value in stacked.items()}

    @torch.no_grad()
    def set_replica(self, index: int, model: Graphormer) -> None:
        """Copies ``model``'s weights into replica ``index``."""
        own = {**self._stacked(self.names, True),
               **self._stacked(self.persistent_buffer_names, False)}
        for name, value in model.state_dict().items():
            own[name][index].copy_(value)

    def replica(self, index: int) -> Graphormer:
        """Replica ``index`` as a plain :class:`Graphormer` (a copy on the CPU, same dtype)."""
        model = Graphormer(self.config)
        model.load_state_dict({k: v.cpu() for k, v in self.replica_state_dict(index).items()},
                              assign=True)
        return model


def _non_persistent_buffers(model: nn.Module) -> set[str]:
    return {f"{prefix}.{name}" if prefix else name for prefix, module in model.named_modules()
            for name in module._non_persistent_buffers_set}


@torch.no_grad()
def clip_grad_norm_per_replica(parameters: Sequence[Tensor], max_norm: float) -> Tensor:
    """Clips each replica's gradient (dim 0 of every stacked parameter) to ``max_norm``.

    The replica's norm is over all its parameters, and the factor is
    ``min(1, max_norm / (norm + 1e-6))``, as in ``torch.nn.utils.clip_grad_norm_``.

    Returns:
        ``[R]`` the norms before clipping.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    squares = torch.stack([g.float().pow(2).flatten(1).sum(1) if g.dtype != torch.float64
                           else g.pow(2).flatten(1).sum(1) for g in grads])
    norms = squares.sum(0).sqrt()
    factor = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(factor.to(g.dtype).view(-1, *[1] * (g.dim() - 1)))
    return norms
