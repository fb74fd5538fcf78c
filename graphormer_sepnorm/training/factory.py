"""The CLI's ``model``: a :class:`GraphormerModule`, or packed replicas when ``seeds`` are given."""

# No ``from __future__ import annotations``: Lightning reads the factory's return annotation
# as a class to find its module type.
from pathlib import Path
from typing import Any

from graphormer_sepnorm.checkpoints import read_checkpoint
from graphormer_sepnorm.training.module import GraphormerModule
from graphormer_sepnorm.training.packed_module import PackedGraphormerModule

__all__ = ["graphormer_module", "load_module", "module_class"]


def module_class(seeds: Any) -> type[GraphormerModule]:
    """:class:`PackedGraphormerModule` when ``seeds`` lists any, else :class:`GraphormerModule`."""
    return PackedGraphormerModule if seeds else GraphormerModule


def graphormer_module(**kwargs: Any) -> GraphormerModule:
    """A :class:`GraphormerModule`, or a :class:`PackedGraphormerModule` when ``seeds`` are given.

    Args:
        **kwargs: :class:`GraphormerModule`'s arguments.

    Examples:
        >>> info = {"task": "regression", "target_names": ["y"], "atom_feature_dims": [4],
        ...         "edge_feature_dims": [2]}
        >>> type(graphormer_module(dataset_info=info, seeds=[0, 1])).__name__
        'PackedGraphormerModule'
    """
    # the classes called by name, not through module_class: jsonargparse reads the arguments
    # from these calls (it resolves **kwargs passed to a class it can see)
    if kwargs.get("seeds"):
        return PackedGraphormerModule(**kwargs)
    return GraphormerModule(**kwargs)


def load_module(path: str | Path, **kwargs: Any) -> GraphormerModule:
    """A checkpoint's module, packed or not (``load_from_checkpoint``'s ``kwargs``)."""
    # mmap: only the hyperparameters are read here; load_from_checkpoint reads the weights
    hparams = read_checkpoint(path, mmap=True).get("hyper_parameters", {})
    return module_class(hparams.get("seeds")).load_from_checkpoint(path, **kwargs)
