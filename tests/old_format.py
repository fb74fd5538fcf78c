"""Checkpoints in the format before ``GraphormerConfig``, made from current ones, for tests."""

from __future__ import annotations

from typing import Any

import torch

DATA_SIZES = ("atom_feature_dims", "edge_feature_dims", "num_tasks")


def downgrade(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The inverse of ``convert.convert``: flat model hyperparameters, no backend or
    init_from, ``target_mean``/``target_std`` at the top of the state_dict for every task."""
    out = dict(checkpoint)
    out.pop("graphormer_sepnorm_format", None)
    hparams = dict(out["hyper_parameters"])
    config = hparams.pop("config")
    hparams.pop("backend", None)
    hparams.pop("init_from", None)
    hparams.update({k: v for k, v in config.items() if k not in DATA_SIZES})
    out["hyper_parameters"] = hparams
    state = {k: v for k, v in out["state_dict"].items() if not k.startswith("task.")}
    t = config["num_tasks"]
    state["target_mean"] = out["state_dict"].get("task.target_mean", torch.zeros(t))
    state["target_std"] = out["state_dict"].get("task.target_std", torch.ones(t))
    out["state_dict"] = state
    return out
