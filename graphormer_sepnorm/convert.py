"""``graphormer-sepnorm-convert OLD NEW``: a checkpoint of an earlier format, once, as the current.

Nothing else upgrades checkpoints: the reader
(:func:`~graphormer_sepnorm.checkpoints.read_checkpoint`) refuses an earlier format and names
this command. What changed, format by format (a file may need several steps; each is a no-op on
a file that has it already):

- model hyperparameters flat in ``hyper_parameters`` (``num_layers``, ``hidden_dim``, ...)
  become ``hyper_parameters['config']``, with the data sizes from ``dataset_info``;
- ``target_mean`` / ``target_std`` at the top of the ``state_dict`` become the regression
  task's buffers ``task.*`` (and are dropped for a binary task, which has no scaler);
- a binary task saved before temperature scaling gets ``task.logit_scale`` 1 (uncalibrated, as
  it was trained);
- a fingerprint GP held by the module (``gp.*`` weights, ``gp_weight``) becomes
  ``checkpoint['ensemble']``; a blend calibrated before the members' spread was added keeps
  the GP's deviation alone (``deviation: 'gp'``), and a GP fitted before its uncertainty
  buffers gets them empty (it gives no deviations);
- datamodule settings saved before the grid engine was an object (``engine: 'device'`` or
  ``'loader'``, ``train_length``, ``replica_seeds``, ``train_tokens``) become a ``GridEngine``
  config or ``None``;
- a CSV datamodule saved before scaffold ties were hashed gets ``scaffold_ties: file_order``,
  so that its test split is still the one it was fit beside;
- a packed fit's optimizer state from ``FlatAdamW`` becomes torch's fused AdamW's;
- the format version (:data:`~graphormer_sepnorm.checkpoints.FORMAT_KEY`) is stamped.

Everything else (optimizer and loop states, ``model_card``, metrics) is kept as it is, so a
converted ``last.ckpt`` still resumes.

Examples:
    >>> import torch
    >>> old = {"hyper_parameters": {"num_layers": 2, "hidden_dim": 16, "lr": 1e-3,
    ...                             "dataset_info": {"task": "binary", "target_names": ["y"],
    ...                                              "atom_feature_dims": [5],
    ...                                              "edge_feature_dims": [3]}},
    ...        "state_dict": {"target_mean": torch.zeros(1), "target_std": torch.ones(1)}}
    >>> new = convert(old)
    >>> new["hyper_parameters"]["config"]["num_layers"], sorted(new["state_dict"])
    (2, ['task.logit_scale'])
"""

from __future__ import annotations

import argparse
import dataclasses
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from graphormer_sepnorm.checkpoints import FORMAT_KEY, FORMAT_VERSION, CheckpointError, stamp
from graphormer_sepnorm.chem.layout import feature_columns
from graphormer_sepnorm.nn.config import GraphormerConfig

MODEL_KEYS = frozenset(f.name for f in dataclasses.fields(GraphormerConfig))
SCALER_KEYS = ("target_mean", "target_std")
ENGINE = "graphormer_sepnorm.grid.GridEngine"


def convert_hparams(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """Flat model hyperparameters moved into ``config``, with the data sizes filled in."""
    out = dict(hparams)
    for key in ("gp_weight", "gp_max_train"):  # the GP's, now beside the module (convert_gp)
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


def convert_state_dict(state_dict: Mapping[str, Any], task: str | None,
                       num_targets: int) -> dict[str, Any]:
    """The top-level target scaler as the task's buffers, and a binary task's temperature."""
    out = dict(state_dict)
    for key in SCALER_KEYS:
        if key in out:
            value = out.pop(key)
            if task == "regression":
                out[f"task.{key}"] = value
    if task == "binary":
        out.setdefault("task.logit_scale", torch.ones(num_targets))
    return out


def convert_gp(checkpoint: dict[str, Any], weight: float) -> None:
    """Moves a fingerprint GP kept in the module (``gp.*`` weights) to ``ensemble``, in place.

    An unfitted one is dropped.
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


def convert_ensemble(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A blend's entry with the deviation kind and the GP's uncertainty buffers it lacked.

    Calibrated before the members' spread was added, its deviation is the GP's alone
    (``'gp'``); a GP fitted before its uncertainty buffers gets them empty (no deviations).
    """
    out = dict(entry)
    out.setdefault("deviation", "gp" if "q90" in out else "gp+members")
    state = dict(out.get("state") or {})
    targets = int(out.get("num_targets", 1))
    state.setdefault("present", torch.zeros(0, targets, dtype=torch.bool))
    state.setdefault("loo_sq", torch.zeros(0, targets))
    out["state"] = state
    return out


def convert_datamodule(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """A datamodule's saved settings as today's (engine object, scaffold ties)."""
    out = dict(hparams)
    engine = out.get("engine")
    if isinstance(engine, str):
        out["engine"] = None if engine == "loader" else {
            "class_path": ENGINE, "init_args": {"train_length": out.get("train_length",
                                                                        "bucketed")}}
    for old in ("replica_seeds", "train_length", "train_tokens"):
        out.pop(old, None)
    if str(out.get("_class_path", "")).endswith("SmilesCSVDataModule"):
        out.setdefault("scaffold_ties", "file_order")
    return out


def convert_optimizer_states(states: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Packed fits' ``FlatAdamW`` states as torch's fused AdamW's (which replaced it).

    Its parameter groups held a ``decay_mask`` and ``capturable`` steps; the moments and step
    counts carry over as they are.
    """
    out = []
    for state in states:
        groups = []
        for group in state.get("param_groups", []):
            if "decay_mask" in group:
                group = {k: v for k, v in group.items() if k != "decay_mask"}
                group.update(capturable=False, fused=True)
            groups.append(group)
        out.append({**state, "param_groups": groups})
    return out


def convert(checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    """``checkpoint`` (a dict from ``torch.load``) in the current format.

    Returns:
        A new dict; ``checkpoint`` itself is left as it was. One of the current format comes
        back equal to it.
    """
    out = dict(checkpoint)
    if out.get(FORMAT_KEY, 1) > FORMAT_VERSION:
        raise CheckpointError(f"checkpoint format {out[FORMAT_KEY]} is newer than this "
                              f"graphormer-sepnorm's ({FORMAT_VERSION}): upgrade the package")
    hparams = convert_hparams(out.get("hyper_parameters") or {})
    if "hyper_parameters" in out:
        out["hyper_parameters"] = hparams
    if "state_dict" in out:
        info = hparams.get("dataset_info") or {}
        out["state_dict"] = convert_state_dict(out["state_dict"], info.get("task"),
                                               len(info.get("target_names") or [None]))
    convert_gp(out, float((checkpoint.get("hyper_parameters") or {}).get("gp_weight", 0.0)))
    if "ensemble" in out:
        out["ensemble"] = convert_ensemble(out["ensemble"])
    if "optimizer_states" in out:
        out["optimizer_states"] = convert_optimizer_states(out["optimizer_states"])
    if "datamodule_hyper_parameters" in out:
        out["datamodule_hyper_parameters"] = convert_datamodule(
            out["datamodule_hyper_parameters"])
    return stamp(out)


def convert_file(source: str | Path, destination: str | Path) -> Path:
    """Reads ``source`` (weights-only, any format), writes it converted to ``destination``.

    Raises:
        CheckpointError: ``source`` cannot be read safely, or is from a newer version.
    """
    try:
        payload = torch.load(source, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, OSError, RuntimeError, EOFError, ValueError) as e:
        raise CheckpointError(f"cannot read {source} with torch.load(weights_only=True): "
                              f"{str(e).strip().splitlines()[0] if str(e).strip() else e}"
                              ) from None
    if not isinstance(payload, dict):
        raise CheckpointError(f"{source} is not a graphormer-sepnorm checkpoint (not a dict)")
    converted = convert(payload)
    destination = Path(destination)
    partial = destination.with_name(destination.name + ".partial")
    torch.save(converted, partial)
    partial.replace(destination)
    return destination


def main(argv: list[str] | None = None) -> None:
    """Console entry point ``graphormer-sepnorm-convert OLD NEW``."""
    parser = argparse.ArgumentParser(
        prog="graphormer-sepnorm-convert",
        description="Converts a checkpoint of an earlier graphormer-sepnorm format to the "
                    f"current one (format {FORMAT_VERSION}); weights and training state "
                    "are kept.")
    parser.add_argument("old", type=Path, help="the checkpoint to convert")
    parser.add_argument("new", type=Path, help="where to write the converted checkpoint")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace NEW if it exists (NEW may then be OLD itself)")
    args = parser.parse_args(argv)
    if not args.old.is_file():
        parser.error(f"no such file: {args.old}")
    if args.new.exists() and not args.overwrite:
        parser.error(f"{args.new} exists; pass --overwrite to replace it")
    try:
        convert_file(args.old, args.new)
    except CheckpointError as e:
        parser.exit(1, f"graphormer-sepnorm-convert: error: {e}\n")
    print(f"wrote {args.new} (checkpoint format {FORMAT_VERSION})")


if __name__ == "__main__":
    main()
