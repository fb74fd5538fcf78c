"""Models beside the network: a fingerprint GP, and the blend of both that small data predicts with.

- :mod:`~graphormer_sepnorm.ensemble.fingerprint_gp`: an exact GP on the molecule features
  (Tanimoto kernel on Morgan counts + RBF on RDKit descriptors);
- :mod:`~graphormer_sepnorm.ensemble.blend`: ``BlendedModel``, ``(1 - w) * network + w * GP``,
  and its entry in checkpoints;
- :mod:`~graphormer_sepnorm.ensemble.callback`: ``FingerprintGPBlend``, which fits the GP in a
  fit and scores the blend (``--gp.weight``).

Names are imported on first use: the blend and the GP need torch alone, the callback Lightning.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {"BlendedModel": "blend", "FingerprintGP": "fingerprint_gp",
          "FingerprintGPBlend": "callback"}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
