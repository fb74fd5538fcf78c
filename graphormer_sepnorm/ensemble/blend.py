"""The network and a fingerprint GP as one model: ``(1 - w) * network + w * GP``.

A :class:`BlendedModel` is what ``test``, ``validate`` and prediction run when a fit made one
(:class:`~graphormer_sepnorm.ensemble.callback.FingerprintGPBlend`): the network's predictions
in the targets' units, and the GP's on the same molecules' features (``batch.mol_x``), mixed
with a fixed weight. It travels in a checkpoint beside the network, under
``checkpoint['ensemble']`` (:meth:`BlendedModel.to_checkpoint`: plain values and tensors, so it
loads with ``weights_only=True``); the network's own ``state_dict`` knows nothing of it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import Tensor, nn

from graphormer_sepnorm.ensemble.fingerprint_gp import FingerprintGP

__all__ = ["KIND", "BlendedModel"]

#: ``checkpoint['ensemble']['kind']`` of a fingerprint-GP blend.
KIND = "fingerprint_gp"


class BlendedModel(nn.Module):
    """A network's predictions blended with a fingerprint GP's.

    Args:
        gp: the GP (fitted, or to be fitted before it predicts).
        weight: ``w`` in ``(1 - w) * network + w * GP``, in [0, 1]: 0 is the network alone,
            1 the GP alone.
        network: a callable from a batch to the network's predictions ``[B, T]`` in the
            targets' units (a :class:`~graphormer_sepnorm.training.module.GraphormerModule`),
            for :meth:`forward`; :meth:`combine` needs none.

    Raises:
        ValueError: a weight outside [0, 1].
    """

    def __init__(self, gp: FingerprintGP, weight: float,
                 network: Callable[[Any], Tensor] | None = None) -> None:
        super().__init__()
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"the GP's weight must be in [0, 1], not {weight}")
        self.gp, self.weight = gp, float(weight)
        self._network = [network]  # in a list: not a submodule (its weights are its own)

    def combine(self, preds: Tensor, mol_x: Tensor) -> Tensor:
        """``(1 - w) * preds + w * GP(mol_x)`` for network predictions ``preds [B, T]``."""
        if self.weight == 0.0:
            return preds
        return (1 - self.weight) * preds + self.weight * self.gp(mol_x).to(preds.dtype)

    def forward(self, batch: Any) -> Tensor:
        """The blended predictions ``[B, T]`` of a batch (with ``mol_x``)."""
        network = self._network[0]
        if network is None:
            raise RuntimeError("BlendedModel without a network: use combine(preds, mol_x)")
        return self.combine(network(batch), batch.mol_x)

    def to_checkpoint(self) -> dict[str, Any]:
        """The GP and the weight as ``checkpoint['ensemble']``."""
        return {"kind": KIND, "weight": self.weight,
                "columns": {name: list(cols) for name, cols in self.gp.slices.items()},
                "num_targets": int(self.gp.hyper.shape[0]),
                "state": {k: v.detach().cpu().clone() for k, v in self.gp.state_dict().items()}}

    @classmethod
    def from_checkpoint(cls, entry: Mapping[str, Any],
                        network: Callable[[Any], Tensor] | None = None,
                        weight: float | None = None) -> BlendedModel:
        """The model :meth:`to_checkpoint` saved; ``weight`` overrides the saved one.

        Raises:
            ValueError: an entry of another kind.
        """
        if entry.get("kind") != KIND:
            raise ValueError(f"unknown ensemble kind {entry.get('kind')!r} (this code knows "
                             f"{KIND!r})")
        gp = FingerprintGP({k: tuple(v) for k, v in entry["columns"].items()},
                           int(entry["num_targets"]))
        gp.load_state_dict(entry["state"])
        return cls(gp, entry["weight"] if weight is None else weight, network)
