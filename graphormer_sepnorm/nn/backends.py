"""Which implementation runs a model's encoder: the reference or the CPU backend."""

from __future__ import annotations

from typing import Literal

from graphormer_sepnorm.nn.model import Graphormer

Backend = Literal["auto", "reference", "cpu"]
BACKENDS: tuple[Backend, ...] = ("auto", "reference", "cpu")


def set_backend(model: Graphormer, backend: Backend = "auto") -> Graphormer:
    """Chooses how ``model`` encodes; parameters and ``state_dict`` are the same for all.

    ``'reference'``: the reference model only (full bias, SDPA, composed SepNorm), the path a
    GPU runs. ``'cpu'``: the CPU backend (:mod:`graphormer_sepnorm.nn.cpu`) on CPU tensors;
    raises on others. ``'auto'`` (default): the CPU backend where it applies, else the
    reference. Attention weights (``need_weights``) always come from the reference.

    Returns:
        ``model``.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; use one of {BACKENDS}")
    from graphormer_sepnorm.nn import cpu  # the wing, imported only when chosen

    model.backend = backend
    model.fast_encode = {"reference": None, "auto": cpu.encode_if_applicable,
                         "cpu": cpu.encode_or_raise}[backend]
    return model
