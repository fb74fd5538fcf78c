"""Checkpoints of the previous format, read as the current one.

Current format: ``hyper_parameters['config']`` holds the model's hyperparameters as plain values
(:meth:`GraphormerConfig.to_dict <graphormer_sepnorm.nn.config.GraphormerConfig.to_dict>`, the
data sizes included), and a regression target scaler is the task's buffers
``task.target_mean`` and ``task.target_std`` in the ``state_dict``.

Previous format (up to the commit that introduced ``GraphormerConfig``): the model's
hyperparameters flat in ``hyper_parameters`` (``num_layers``, ``hidden_dim``, ...; the data
sizes only in ``dataset_info``), and ``target_mean`` / ``target_std`` at the top of the
``state_dict`` for every task (0 and 1 for binary ones, which now have no scaler).

:func:`upgrade` turns the one into the other; everything that reads checkpoints calls it
(prediction, :meth:`GraphormerModule.load_from_checkpoint
<graphormer_sepnorm.training.module.GraphormerModule.load_from_checkpoint>`, a trainer's
restore through ``on_load_checkpoint``, the CLI's ``--ckpt_path``, ``init_from``). A current
checkpoint comes back unchanged.

Examples:
    >>> import torch
    >>> old = {"hyper_parameters": {"num_layers": 2, "hidden_dim": 16, "lr": 1e-3,
    ...                             "dataset_info": {"task": "binary", "target_names": ["y"],
    ...                                              "atom_feature_dims": [5],
    ...                                              "edge_feature_dims": [3]}},
    ...        "state_dict": {"target_mean": torch.zeros(1), "target_std": torch.ones(1)}}
    >>> new = upgrade(old)
    >>> new["hyper_parameters"]["config"]["num_layers"], sorted(new["state_dict"])
    (2, [])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from graphormer_sepnorm.chem.layout import feature_columns
from graphormer_sepnorm.nn.config import GraphormerConfig

MODEL_KEYS = frozenset(f.name for f in dataclasses.fields(GraphormerConfig))
SCALER_KEYS = ("target_mean", "target_std")


def is_current(checkpoint: Mapping[str, Any]) -> bool:
    """Whether ``checkpoint`` is in the current format.

    Its hyperparameters have a config, and none of a GP inside the module (:func:`upgrade_gp`).
    """
    hparams = checkpoint.get("hyper_parameters") or {}
    return "config" in hparams and not {"gp_weight", "gp_max_train"} & set(hparams)


def upgrade_hparams(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """Flat model hyperparameters moved into ``config``, with the data sizes filled in.

    Args:
        hparams: A checkpoint's ``hyper_parameters``, of either format.

    Returns:
        A new dict; ``hparams`` itself is left as it was.
    """
    out = dict(hparams)
    for key in ("gp_weight", "gp_max_train"):  # the GP's, now beside the module (upgrade_gp)
        out.pop(key, None)
    if "config" in out:
        return out
    config = {key: out.pop(key) for key in list(out) if key in MODEL_KEYS}
    info = out.get("dataset_info") or {}
    for key in ("atom_feature_dims", "edge_feature_dims"):
        if key in info:
            config[key] = list(info[key])
    if "target_names" in info:
        config["num_tasks"] = len(info["target_names"])
    out["config"] = GraphormerConfig.from_dict(config).to_dict()
    return out


def upgrade_state_dict(state_dict: Mapping[str, Any], task: str | None) -> dict[str, Any]:
    """The top-level target scaler as the task's buffers (regression) or dropped (binary).

    Args:
        state_dict: A module's ``state_dict``, of either format.
        task: ``dataset_info['task']``.

    Returns:
        A new dict, in the same order; ``state_dict`` itself is left as it was.
    """
    out = dict(state_dict)
    for key in SCALER_KEYS:
        if key in out:
            value = out.pop(key)
            if task == "regression":
                out[f"task.{key}"] = value
    return out


def upgrade_gp(checkpoint: dict[str, Any], weight: float) -> None:
    """Moves a fingerprint GP kept in the module (``gp.*`` weights, ``gp_weight``) out of it.

    Between the GP blend's introduction and the ``ensemble`` package, the module held the GP:
    its buffers as ``gp.*`` in the ``state_dict`` and ``gp_weight``/``gp_max_train`` among its
    hyperparameters. Now the GP and its weight are ``checkpoint['ensemble']`` (see
    :class:`~graphormer_sepnorm.ensemble.blend.BlendedModel`); an unfitted one is dropped.

    Args:
        checkpoint: the checkpoint, hyperparameters upgraded already; changed in place.
        weight: the original hyperparameters' ``gp_weight``.
    """
    hparams, state = checkpoint.get("hyper_parameters") or {}, checkpoint.get("state_dict")
    gp = {k.removeprefix("gp."): v for k, v in (state or {}).items() if k.startswith("gp.")}
    if not gp:
        return
    for key in list(state):
        if key.startswith("gp."):
            del state[key]
    if weight and gp["train_x"].shape[0] > 0 and "ensemble" not in checkpoint:
        names = ((hparams.get("dataset_info") or {}).get("featurizer") or {}).get(
            "mol_features", [])
        columns = {n: list(c) for n, c in feature_columns(names).items()
                   if n in ("morgan", "rdkit2d")}
        checkpoint["ensemble"] = {"kind": "fingerprint_gp", "weight": float(weight),
                                  "columns": columns, "num_targets": int(gp["hyper"].shape[0]),
                                  "state": gp}


def upgrade(checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    """A checkpoint (a dict from ``torch.load``) in the current format.

    ``hyper_parameters`` and ``state_dict`` change, and a GP held by the module moves to
    ``ensemble`` (:func:`upgrade_gp`); other entries (``model_card``, the optimizer and loop
    states, ``datamodule_hyper_parameters``) are kept as they are.

    Returns:
        A new dict; ``checkpoint`` itself is left as it was.
    """
    out = dict(checkpoint)
    hparams = upgrade_hparams(out.get("hyper_parameters") or {})
    if "hyper_parameters" in out:
        out["hyper_parameters"] = hparams
    if "state_dict" in out:
        task = (hparams.get("dataset_info") or {}).get("task")
        out["state_dict"] = upgrade_state_dict(out["state_dict"], task)
    upgrade_gp(out, float((checkpoint.get("hyper_parameters") or {}).get("gp_weight", 0.0)))
    return out


def load(path: str | Path, map_location: Any = "cpu") -> dict[str, Any]:
    """``torch.load(path, weights_only=True)``, upgraded to the current format.

    Raises:
        FileNotFoundError: No such file.
        pickle.UnpicklingError: The file needs more than tensors and plain values.
    """
    return upgrade(torch.load(path, map_location=map_location, weights_only=True))
