"""Safe checkpoint loading: bundled model names, ``weights_only=True`` only, no config files.

A checkpoint is a ``torch.save``-d dict with ``state_dict`` and ``hyper_parameters`` (what
Lightning writes, or a plain dict made by hand). Everything prediction needs travels in it: the
model's config in ``hyper_parameters['config']``, the featurizer config, task and target names
in ``hyper_parameters['dataset_info']``, the target scaler as buffers of the state dict.
Every file is read by :func:`~graphormer_sepnorm.checkpoints.read_checkpoint`, which takes the
current format only (``graphormer-sepnorm-convert`` converts an earlier one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from graphormer_sepnorm.checkpoints import (  # noqa: F401 (re-exported: prediction's API)
    BUNDLED_CHECKPOINTS,
    DEFAULT_CHECKPOINT,
    FORMAT_KEY,
    FORMAT_VERSION,
    CheckpointError,
    bundled_checkpoint_path,
    read_checkpoint,
    resolve_checkpoint,
)
from graphormer_sepnorm.ensemble.blend import BlendedModel
from graphormer_sepnorm.training.module import GraphormerModule


def read_model(path: Path, map_location: Any = "cpu") -> dict[str, Any]:
    """:func:`~graphormer_sepnorm.checkpoints.read_checkpoint`, with a model in it.

    Raises:
        CheckpointError: as the reader, or no ``state_dict`` and ``hyper_parameters``.
    """
    payload = read_checkpoint(path, map_location)
    if not {"state_dict", "hyper_parameters"} <= set(payload):
        raise CheckpointError(f"{path} is not a Graphormer checkpoint: expected a dict with "
                              "'state_dict' and 'hyper_parameters'")
    return payload


def module_from_payload(payload: dict[str, Any], source: str = "checkpoint",
                        state_dict: dict[str, Any] | None = None) -> GraphormerModule:
    """Builds ``GraphormerModule(**hyper_parameters)``, loads the weights, eval mode.

    The payload is of the current format (:func:`~graphormer_sepnorm.checkpoints.read_checkpoint`
    checks it). Lightning's private keys (any ``_``-prefixed one) are dropped, and so are the
    backend the model was trained with (the module runs with ``backend='auto'``, the choice
    for the machine it is loaded on) and a packed fit's ``seeds``.

    Args:
        payload: the checkpoint.
        source: its name in messages.
        state_dict: the weights, if not the payload's own (a packed fit's replica).

    Raises:
        CheckpointError: Hyper-parameters or weights that do not fit this code.
    """
    hparams = {k: v for k, v in dict(payload["hyper_parameters"]).items()
               if not str(k).startswith("_") and k not in ("backend", "seeds")}
    info = hparams.get("dataset_info")
    if not isinstance(info, dict) or "featurizer" not in info:
        raise CheckpointError(f"{source} has no featurizer in hyper_parameters['dataset_info']; "
                              "it cannot be used on SMILES")
    try:
        module = GraphormerModule(**hparams)
        module.load_state_dict(payload["state_dict"] if state_dict is None else state_dict)
    except (TypeError, ValueError, RuntimeError, KeyError) as e:
        raise CheckpointError(f"{source} does not fit this version of graphormer-sepnorm: "
                              f"{e}") from None
    return module.eval()


def members_of_payload(payload: dict[str, Any], source: str
                       ) -> list[tuple[GraphormerModule, BlendedModel | None, str]]:
    """A checkpoint's models: its network and GP blend, or a packed fit's replicas.

    A packed fit's ``state_dict`` holds each weight stacked ``[R, ...]`` under its name with
    ``__`` for ``.``; replica ``r`` is the ``r``-th slice (packed fits have no GP).

    Returns:
        ``(module, blend or None, name)`` per model.

    Raises:
        CheckpointError: as :func:`module_from_payload`, or a blend this code cannot read.
    """
    seeds = payload["hyper_parameters"].get("seeds")
    if not seeds:
        module = module_from_payload(payload, source)
        return [(module, _blend(payload, module, source), source)]
    state = payload["state_dict"]
    out = []
    for index, seed in enumerate(seeds):
        own = {(f"model.{k.removeprefix('model.').replace('__', '.')}"
                if k.startswith("model.") else k): (v[index] if k.startswith("model.") else v)
               for k, v in state.items()}
        name = f"{source}[seed {seed}]"
        out.append((module_from_payload(payload, name, own), None, name))
    return out


def _blend(payload: dict[str, Any], module: GraphormerModule, source: str
           ) -> BlendedModel | None:
    entry = payload.get("ensemble")
    if entry is None:
        return None
    try:
        return BlendedModel.from_checkpoint(entry, network=module).eval()
    except (ValueError, KeyError, RuntimeError) as e:
        raise CheckpointError(f"{source}: its ensemble entry cannot be read: {e}") from None


def load_checkpoint(path_or_name: str | Path = DEFAULT_CHECKPOINT,
                    map_location: str | torch.device = "cpu") -> GraphormerModule:
    """Loads a checkpoint file or a bundled model (``'molhiv'``, ``'zinc'``) for prediction.

    Only ``torch.load(..., weights_only=True)`` is used: a checkpoint that needs arbitrary
    pickled objects is refused and its payload never runs. The network alone: a GP saved
    beside it comes with :func:`load_with_blend`.

    Args:
        path_or_name: A checkpoint file, or the name of a bundled model.
        map_location: Where tensors are loaded. Default: ``'cpu'``.

    Returns:
        The :class:`~graphormer_sepnorm.training.module.GraphormerModule`, in eval mode.

    Raises:
        CheckpointError: Not found, unsafe, or not a Graphormer checkpoint of this code.
    """
    return load_with_blend(path_or_name, map_location)[0]


def load_with_blend(path_or_name: str | Path = DEFAULT_CHECKPOINT,
                    map_location: str | torch.device = "cpu"
                    ) -> tuple[GraphormerModule, BlendedModel | None]:
    """:func:`load_checkpoint`, and the fingerprint GP blend saved with it, if any.

    Raises:
        CheckpointError: as :func:`load_checkpoint`, or a blend this code cannot read.
    """
    path = resolve_checkpoint(path_or_name)
    payload = read_model(path, map_location)
    if payload["hyper_parameters"].get("seeds"):
        raise CheckpointError(f"{path} is a packed fit's checkpoint: it holds one model per seed "
                              f"{payload['hyper_parameters']['seeds']}. Predict with all of "
                              "them as an ensemble (graphormer-sepnorm-predict --checkpoint, "
                              "predict_smiles), or with one replica's replicas/seed<s>.ckpt")
    module, blend, _ = members_of_payload(payload, str(path))[0]
    return module.to(map_location), None if blend is None else blend.to(map_location)


def export_checkpoint(source: str | Path, destination: str | Path,
                      card: dict[str, Any] | None = None) -> Path:
    """Writes a prediction-only copy of a training checkpoint: weights and hyper-parameters.

    The source must be of the current format (``graphormer-sepnorm-convert`` converts an older
    one). Optimizer,
    scheduler and loop states are dropped (they triple a checkpoint's size and
    prediction never needs them); ``card`` (plain values: data, config, metrics) is kept as
    ``model_card``. The source is read with ``weights_only=True`` like any checkpoint.

    Args:
        source: a Lightning checkpoint.
        destination: the file to write.
        card: the model card, stored under ``'model_card'``.

    Returns:
        ``destination`` as a path.
    """
    payload = read_model(Path(source), "cpu")
    module_from_payload(payload, str(source))  # refuse what prediction could not load
    slim = {FORMAT_KEY: FORMAT_VERSION, "state_dict": payload["state_dict"],
            "hyper_parameters": {k: v for k, v in dict(payload["hyper_parameters"]).items()
                                 if not str(k).startswith("_")},
            "model_card": dict(card or {})}
    if "ensemble" in payload:  # the GP blended with the network
        slim["ensemble"] = payload["ensemble"]
    out = Path(destination)
    torch.save(slim, out)
    return out
