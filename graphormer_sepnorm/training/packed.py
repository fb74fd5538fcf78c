"""Several replicas of one model trained as one: stacked parameters, one ``vmap``.

:class:`PackedReplicas` runs ``R`` models of one config (seeds of one recipe) under
``torch.func.vmap``, so every kernel does ``R`` replicas' work; each keeps its own parameters,
BatchNorm statistics, dropout draws and batches. All parameters live in one ``[R, N]`` tensor
(``flat``): one AdamW steps each replica as its own would, with
:func:`clip_grad_norm_per_replica` and :func:`exempt_untrained` doing what a single run's
clipping and AdamW do. ``state_dict`` keeps one stacked entry per parameter.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap
from torch_geometric.data import Data

from graphormer_sepnorm.data.batch import GraphormerBatch, GridBatch
from graphormer_sepnorm.data.collate import GraphormerCollator
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
        a stacked :class:`~graphormer_sepnorm.data.batch.GridBatch` (fields with a leading
        ``R``: one batch per replica), or any batch without (every replica on the same graphs)
        -> ``[R, B, num_tasks]``.
    """

    def __init__(self, models: Sequence[Graphormer]) -> None:
        super().__init__()
        if not models or any(m.config != models[0].config for m in models):
            raise ValueError("packed replicas need at least one model, all of one config")
        params, buffers = stack_module_state(list(models))
        # the BatchNorms' parameters last: under autocast the others are cast as one block
        float32 = {f"{prefix}.{name}" for prefix, module in models[0].named_modules()
                   if isinstance(module, nn.BatchNorm1d)
                   for name, _ in module.named_parameters(recurse=False)}
        self.names = sorted(params, key=lambda name: name in float32)
        self.low_precision = len(self.names) - len(float32)
        self.buffer_names = list(buffers)
        self.shapes = [params[name].shape[1:] for name in self.names]
        self.sizes = [params[name][0].numel() for name in self.names]
        self.flat = nn.Parameter(torch.cat([params[name].detach().reshape(len(models), -1)
                                            for name in self.names], 1))
        # on the parameters' device: the probe that finds it runs on the CPU
        self.register_buffer("trained", _trained_mask(models[0], self.names, self.sizes).to(
            self.flat.device), persistent=False)
        transient = _non_persistent_buffers(models[0])
        for name, value in buffers.items():
            self.register_buffer(_key(name), value.clone(), persistent=name not in transient)
        self.persistent_buffer_names = [n for n in self.buffer_names if n not in transient]
        skeleton = copy.deepcopy(models[0]).to("meta")
        skeleton.fast_encode = None  # the reference encoder: the CPU wing's does not vmap
        for module in skeleton.modules():
            if isinstance(module, BiasedMultiheadAttention):
                module.fused = False  # off CUDA explicit: SDPA gives no bias gradient under vmap
            if isinstance(module, FeatureEmbedding):
                module.gather_sums = True  # vmap has no batching rule for embedding_bag
        self._skeleton = [skeleton.train()]  # in a list: not a submodule, no state of its own
        self.num_replicas = len(models)

    @property
    def config(self):
        """The replicas' shared config."""
        return self._skeleton[0].config

    @property
    def skeleton(self) -> Graphormer:
        """The replicas' modules, on the meta device.

        Their flags (training, momentum) steer every replica's forward; their parameters and
        buffers are the stacked ones.
        """
        return self._skeleton[0]

    def train(self, mode: bool = True) -> PackedReplicas:
        """Sets the mode of the replicas' modules (:attr:`skeleton`) too."""
        super().train(mode)
        self._skeleton[0].train(mode)
        return self

    def follow_mode(self) -> None:
        """Puts the skeleton in this module's mode where it is not.

        Lightning restores modes by setting registered modules' ``training`` flags, and the
        skeleton is not registered: the packed module calls this before each training step.
        """
        if self._skeleton[0].training != self.training:
            self._skeleton[0].train(self.training)

    def stacked_buffer(self, name: str) -> Tensor:
        """The ``[R, ...]`` buffer a single model would call ``name``."""
        return self._buffers[_key(name)]

    def forward(self, batch: GraphormerBatch | GridBatch) -> Tensor:
        """Each replica's predictions, ``[R, B, T]``.

        Each on its own batch (a stacked grid batch), or all on one (as in evaluation).
        """
        skeleton = self._skeleton[0]
        tensors = {f.name: value for f in fields(batch)
                   if isinstance(value := getattr(batch, f.name), Tensor)}
        plain = {f.name: value for f in fields(batch)
                 if not isinstance(value := getattr(batch, f.name), Tensor) and value is not None}
        shared = not plain.pop("stacked", False)  # else [R, ...] fields, one batch a replica

        def one(params: dict[str, Tensor], buffers: dict[str, Tensor],
                fields_: dict[str, Tensor]) -> Tensor:
            one_batch = type(batch)(**fields_, **plain)
            return functional_call(skeleton, (params, buffers), (one_batch,))

        return vmap(one, in_dims=(0, 0, None if shared else 0), randomness="different")(
            self._forward_parameters(), self._buffers_of(self.buffer_names), tensors)

    def _forward_parameters(self) -> dict[str, Tensor]:
        """The parameters the replicas compute with: under autocast, in its dtype.

        Cast once, as one block of ``flat`` (under ``vmap`` autocast misses a linear layer's
        bias), except the BatchNorms' float32 parameters, which come last.
        """
        device = self.flat.device.type
        if not torch.is_autocast_enabled(device):
            return self.parameter_views()
        count = self.low_precision
        low, high = self.flat.split([sum(self.sizes[:count]), sum(self.sizes[count:])], dim=1)
        return {**_views(low.to(torch.get_autocast_dtype(device)), self.names[:count],
                         self.shapes[:count], self.sizes[:count]),
                **_views(high, self.names[count:], self.shapes[count:], self.sizes[count:])}

    def parameter_views(self) -> dict[str, Tensor]:
        """Each parameter as a ``[R, ...]`` view of ``flat``."""
        return _views(self.flat, self.names, self.shapes, self.sizes)

    def _buffers_of(self, names: list[str]) -> dict[str, Tensor]:
        return {name: self._buffers[_key(name)] for name in names}

    def _stacked_state(self) -> dict[str, Tensor]:
        """Every parameter and persistent buffer, ``[R, ...]``, by the model's names."""
        return {**self.parameter_views(), **self._buffers_of(self.persistent_buffer_names)}

    def _save_to_state_dict(self, destination: dict[str, Any], prefix: str,
                            keep_vars: bool) -> None:
        # one stacked entry per parameter, as a module of per-name parameters would save
        for name, value in self._stacked_state().items():
            destination[prefix + _key(name)] = value if keep_vars else value.detach()

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, local_metadata: Any,
                              strict: bool, missing_keys: list[str], unexpected_keys: list[str],
                              error_msgs: list[str]) -> None:
        own = {_key(name): value for name, value in self._stacked_state().items()}
        with torch.no_grad():
            for key, target in own.items():
                value = state_dict.get(prefix + key)
                if value is None:
                    missing_keys.append(prefix + key)
                elif value.shape != target.shape:
                    error_msgs.append(f"size mismatch for {prefix + key}: copying a param with "
                                      f"shape {tuple(value.shape)}, the shape in current model "
                                      f"is {tuple(target.shape)}.")
                else:
                    target.copy_(value)
        if strict:
            unexpected_keys.extend(k for k in state_dict
                                   if k.startswith(prefix) and k[len(prefix):] not in own)

    def replica_state_dict(self, index: int) -> dict[str, Tensor]:
        """Replica ``index``'s weights as a single :class:`Graphormer`'s ``state_dict``."""
        return {name: value[index].detach().clone()
                for name, value in self._stacked_state().items()}

    @torch.no_grad()
    def set_replica(self, index: int, model: Graphormer) -> None:
        """Copies ``model``'s weights into replica ``index``."""
        own = self._stacked_state()
        for name, value in model.state_dict().items():
            own[name][index].copy_(value)

    def replica(self, index: int) -> Graphormer:
        """Replica ``index`` as a plain :class:`Graphormer` (a copy on the CPU, same dtype)."""
        model = Graphormer(self.config)
        model.load_state_dict({k: v.cpu() for k, v in self.replica_state_dict(index).items()},
                              assign=True)
        return model


def _views(flat: Tensor, names: list[str], shapes: list[torch.Size],
           sizes: list[int]) -> dict[str, Tensor]:
    """``flat`` ``[R, sum(sizes)]`` split into ``[R, *shape]`` views by name."""
    return {name: chunk.view(len(chunk), *shape)
            for name, chunk, shape in zip(names, flat.split(sizes, dim=1), shapes, strict=True)}


def _trained_mask(model: Graphormer, names: list[str], sizes: list[int]) -> Tensor:
    """``[N]``: 1 for the elements of ``flat`` that ``forward`` trains.

    Found by one forward and backward of a copy of ``model`` on two two-atom graphs.
    """
    config = model.config
    edge = torch.zeros(2, len(config.edge_feature_dims), dtype=torch.long)
    pair = Data(x=torch.zeros(2, len(config.atom_feature_dims), dtype=torch.long),
                edge_index=torch.tensor([[0, 1], [1, 0]]), edge_attr=edge,
                mol_x=torch.zeros(1, config.mol_feature_dim))
    batch = GraphormerCollator(config.multi_hop_max_dist)([pair, pair])
    probe = copy.deepcopy(model).cpu().train()
    with torch.enable_grad():
        probe(batch).sum().backward()
    grads = dict(probe.named_parameters())
    dtype = next(iter(grads.values())).dtype
    return torch.cat([torch.full((size,), float(grads[name].grad is not None), dtype=dtype)
                      for name, size in zip(names, sizes, strict=True)])


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


def exempt_untrained(optimizer: torch.optim.Optimizer, packed: PackedReplicas) -> None:
    """Makes ``optimizer``'s steps leave the elements of ``packed.flat`` forward never trains.

    A single run's AdamW skips a parameter without gradient, weight decay included (the last
    layer's atom norms); packed, weight decay would move them. Hooks keep those elements before
    each step and put them back after it.

    Args:
        optimizer: steps ``packed.flat``.
        packed: the replicas; ``trained`` on ``flat``'s device.
    """
    untrained = (packed.trained == 0).nonzero().flatten()
    if not len(untrained):
        return
    kept: list[Tensor] = []

    def keep(*_: Any) -> None:
        kept[:] = [packed.flat.detach().index_select(1, untrained)]

    def restore(*_: Any) -> None:
        with torch.no_grad():
            packed.flat.index_copy_(1, untrained, kept.pop())

    optimizer.register_step_pre_hook(keep)
    optimizer.register_step_post_hook(restore)
