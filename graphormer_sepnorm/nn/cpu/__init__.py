"""The CPU wing: the reference model's encoder, computed faster on a CPU (:mod:`.encoder`).

Plugged in by :func:`~graphormer_sepnorm.nn.backends.set_backend`: :func:`encode_if_applicable`
is the ``'auto'`` backend, :func:`encode_or_raise` the ``'cpu'`` one.
"""

from __future__ import annotations

from torch import Tensor

from graphormer_sepnorm.data.batch import GraphormerBatch
from graphormer_sepnorm.nn.cpu.encoder import encode, why_not
from graphormer_sepnorm.nn.model import Graphormer

__all__ = ["encode", "encode_if_applicable", "encode_or_raise", "why_not"]


def encode_if_applicable(model: Graphormer, batch: GraphormerBatch,
                         graph_token_only: bool) -> Tensor | None:
    """The CPU backend's tokens where it applies (:func:`why_not`), else ``None``."""
    if why_not(model, batch) is not None:
        return None
    return encode(model, batch, graph_token_only)


def encode_or_raise(model: Graphormer, batch: GraphormerBatch, graph_token_only: bool) -> Tensor:
    """The CPU backend's tokens; raises ``ValueError`` where it does not apply."""
    reason = why_not(model, batch)
    if reason is not None:
        raise ValueError(f"backend 'cpu' cannot run here: {reason}; use backend 'auto' or "
                         "'reference'")
    return encode(model, batch, graph_token_only)
