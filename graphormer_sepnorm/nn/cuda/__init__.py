"""The CUDA wing: what makes the reference model fast on a GPU, and has run on one.

It plugs into :class:`~graphormer_sepnorm.nn.attention.BiasedMultiheadAttention` through
:func:`~graphormer_sepnorm.nn.backends.set_backend` (``model.backend`` ``'cuda'``, or ``'auto'``
on CUDA tensors): attention runs SDPA's memory-efficient kernel on heads zero-padded to its
alignment (:mod:`.attention`). :mod:`.compiling` holds the settings every ``torch.compile`` of
the package uses. The parameters and the function computed are the reference's; the reference
never imports this wing.
"""

from __future__ import annotations

from torch import Tensor

from graphormer_sepnorm.nn.cuda.attention import padded_attention

__all__ = ["attend_if_applicable", "attend_or_raise", "padded_attention"]


def attend_if_applicable(qkv: Tensor, bias: Tensor, num_heads: int, queries: int,
                         dropout_p: float) -> Tensor | None:
    """:func:`~.attention.padded_attention` on CUDA tensors, else ``None`` (the reference's)."""
    if not qkv.is_cuda:
        return None
    return padded_attention(qkv, bias, num_heads, queries, dropout_p)


def attend_or_raise(qkv: Tensor, bias: Tensor, num_heads: int, queries: int,
                    dropout_p: float) -> Tensor:
    """:func:`~.attention.padded_attention`; raises ``ValueError`` on tensors not on CUDA."""
    if not qkv.is_cuda:
        raise ValueError("backend 'cuda' runs on CUDA tensors only; use backend 'auto' or "
                         "'reference'")
    return padded_attention(qkv, bias, num_heads, queries, dropout_p)
