"""Which implementation runs a model: the reference, or a device wing plugged into it."""

from __future__ import annotations

from typing import Literal

from graphormer_sepnorm.nn.attention import BiasedMultiheadAttention
from graphormer_sepnorm.nn.model import Graphormer

Backend = Literal["auto", "reference", "cpu", "cuda"]
BACKENDS: tuple[Backend, ...] = ("auto", "reference", "cpu", "cuda")


def set_backend(model: Graphormer, backend: Backend = "auto") -> Graphormer:
    """Chooses how ``model`` computes; parameters and ``state_dict`` are the same for all.

    ``'reference'``: the reference model only. ``'cpu'``: the CPU wing's encoder
    (:mod:`graphormer_sepnorm.nn.cpu`), raising on other tensors. ``'cuda'``: the CUDA wing's
    attention (:mod:`graphormer_sepnorm.nn.cuda`), raising on other tensors. ``'auto'``
    (default): each wing where it applies. The function is the same up to float rounding
    (dropout draws differ); ``need_weights`` always runs the reference.

    Returns:
        ``model``.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; use one of {BACKENDS}")
    from graphormer_sepnorm.nn import cpu, cuda  # the wings, imported only when chosen

    model.backend = backend
    model.fast_encode = {"auto": cpu.encode_if_applicable, "cpu": cpu.encode_or_raise}.get(backend)
    attend = {"auto": cuda.attend_if_applicable, "cuda": cuda.attend_or_raise}.get(backend)
    for module in model.modules():
        if isinstance(module, BiasedMultiheadAttention):
            module.fast_attend = attend
    return model
