"""Several fits predicting as one: seeds, cross-validation folds, a packed fit's replicas.

An ensemble's prediction is its members' mean, and ``<column>_std`` their spread, for every
prediction column of every task. For regression the spread joins each member's own deviation
(its fingerprint-GP blend's, where it has one) by the law of total variance, and a 90% interval
is calibrated on molecules none of the members trained on, read from the data the members were
fit on (recorded in their checkpoints):

- members fit on one split (seeds): split-conformal on the shared validation split, the
  ensemble's mean and deviation (as a blend calibrates);
- members fit on folds of one file (``--data.split *_folds``): CV+ (Barber et al., 2021) on
  the out-of-fold residuals, each molecule's residual from the member that tested it, so a
  small set's coverage does not rest on a few dozen validation molecules.

Members must agree on the task, the label columns, the classes, the featurizer and the
descriptor columns.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from graphormer_sepnorm.checkpoints import CheckpointError, resolve_checkpoint
from graphormer_sepnorm.data import GraphormerCollator
from graphormer_sepnorm.ensemble.blend import BlendedModel
from graphormer_sepnorm.ensemble.calibration import conformal_scale
from graphormer_sepnorm.ensemble.members import Calibration, combine
from graphormer_sepnorm.prediction.checkpoints import members_of_payload, read_model
from graphormer_sepnorm.training.from_checkpoint import payload_data
from graphormer_sepnorm.training.module import GraphormerModule

__all__ = ["Member", "calibrate", "check_members", "load_members", "predictor_models"]

#: What members must agree on, from their ``dataset_info``.
AGREE = ("task", "target_names", "num_classes", "featurizer", "feature_columns")


@dataclass
class Member:
    """One fit of an ensemble: its network, its GP blend (if any), and where it came from.

    Attributes:
        module: the network, in eval mode.
        blend: the fingerprint GP blended with it, or ``None``.
        source: the checkpoint (``path`` or ``path[replica r]``).
        data: the datamodule it was fit on, ``{'class_path', 'init_args'}``, or ``None``.
    """

    module: GraphormerModule
    blend: BlendedModel | None
    source: str
    data: dict[str, Any] | None = None

    def outputs(self, batch: Any) -> tuple[Tensor, Tensor | None]:
        """Predictions ``[B, C]`` and, with a blend that has them, raw deviations ``[B, T]``."""
        preds = self.module(batch)
        if self.blend is None:
            return preds, None
        return self.blend.predict(preds, batch.mol_x, raw=True)


def load_members(sources: Sequence[str | Path], map_location: Any = "cpu") -> list[Member]:
    """The members of checkpoint files or bundled names (a packed fit's: one per replica).

    Raises:
        CheckpointError: a file that cannot be read, or members that do not agree.
    """
    members = []
    for source in sources:
        path = resolve_checkpoint(source)
        payload = read_model(path, map_location)
        members += [Member(module.to(map_location), blend, name, payload_data(payload))
                    for module, blend, name in members_of_payload(payload, str(path))]
    check_members(members)
    return members


def check_members(members: Sequence[Member]) -> None:
    """Raises unless every member predicts the same columns from the same inputs.

    Raises:
        CheckpointError: no members, or members that differ (the message says in what).
    """
    if not members:
        raise CheckpointError("an ensemble needs at least one checkpoint")
    first = members[0].module.dataset_info
    for member in members[1:]:
        info = member.module.dataset_info
        for key in AGREE:
            if info.get(key) != first.get(key):
                raise CheckpointError(
                    f"ensemble members must agree on {key}: {members[0].source} has "
                    f"{first.get(key)!r}, {member.source} has {info.get(key)!r}")


@torch.no_grad()
def held_out_outputs(members: Sequence[Member], graphs: Sequence[Any], batch_size: int = 256
                     ) -> tuple[list[tuple[Tensor, Tensor | None]], Tensor]:
    """Every member's outputs on ``graphs`` (with ``y``), and their labels ``[N, T]``."""
    collate = GraphormerCollator(members[0].module.config.multi_hop_max_dist)
    parts: list[list[tuple[Tensor, Tensor | None]]] = [[] for _ in members]
    labels = []
    for start in range(0, len(graphs), batch_size):
        batch = collate(list(graphs[start:start + batch_size]))
        labels.append(batch.y)
        for k, member in enumerate(members):
            device = next(member.module.parameters()).device
            parts[k].append(member.outputs(batch.to(device)))
    outputs = []
    for chunks in parts:
        means = torch.cat([m.cpu() for m, _ in chunks])
        stds = None if chunks[0][1] is None else torch.cat([s.cpu() for _, s in chunks])
        outputs.append((means, stds))
    return outputs, torch.cat(labels)


def calibrate(members: Sequence[Member]) -> Calibration | str:
    """The ensemble's calibration from its members' data, or why there is none (in words)."""
    data = [m.data for m in members]
    if any(d is None for d in data):
        return "a member records no data it was fit on"
    init = [dict(d["init_args"]) for d in data]
    folds = [i.pop("fold", None) for i in init]
    if any(i != init[0] or d["class_path"] != data[0]["class_path"]
           for i, d in zip(init, data, strict=True)):
        return "the members were fit on different data or splits"
    if not Path(str(init[0].get("path", ""))).exists():
        return f"the data the members were fit on is not found ({init[0].get('path')})"
    if str(init[0].get("split", "")).endswith("_folds") and len(set(folds)) == len(members):
        return _cv_plus(members, data[0], folds)
    if len(set(folds)) > 1:
        return "the members were fit on different folds, some twice"
    module = _datamodule(data[0]["class_path"], data[0]["init_args"])
    module.setup("fit")
    outputs, y = held_out_outputs(members, module.splits["val"])
    means, _, total = combine(outputs)
    scores = (y.double() - means).abs() / total.clamp_min(1e-12)
    q90 = [float(conformal_scale(scores[:, t])) for t in range(y.shape[1])]
    return Calibration("split", q90=q90, note=f"split-conformal on the {len(y)} validation "
                                              f"molecules of {init[0]['path']}")


def _cv_plus(members: Sequence[Member], data: dict[str, Any], folds: list[int]) -> Calibration:
    """CV+ on each fold model's residuals on the fold it tested.

    The folds' datamodules featurize the file once between them, through a feature cache (the
    members' own ``cache_dir``, else a temporary one): otherwise each fold would featurize
    the whole file again.
    """
    with tempfile.TemporaryDirectory() as scratch:
        init = {**data["init_args"]}
        init["cache_dir"] = init.get("cache_dir") or scratch
        residuals = []
        for member, fold in zip(members, folds, strict=True):
            split = _datamodule(data["class_path"], {**init, "fold": fold})
            (means, _), y = _one(member, split, "test")
            residuals.append((y.double() - means.double()).abs())
    n = sum(len(r) for r in residuals)
    return Calibration("cv+", residuals=residuals,
                       note=f"CV+ on {n} out-of-fold molecules of {data['init_args']['path']}")


def _one(member: Member, datamodule: Any, split: str) -> tuple[tuple[Tensor, Tensor | None],
                                                               Tensor]:
    datamodule.setup("fit")
    outputs, y = held_out_outputs([member], datamodule.splits[split])
    return outputs[0], y


def _datamodule(class_path: str, init_args: dict[str, Any]) -> Any:
    from importlib import import_module

    module_name, name = class_path.rsplit(".", 1)
    return getattr(import_module(module_name), name)(**init_args)


def predictor_models(sources: str | Path | Sequence[str | Path], map_location: Any = "cpu"
                     ) -> tuple[Any, BlendedModel | None, Calibration | None, str | None]:
    """What :class:`~graphormer_sepnorm.prediction.engine.Predictor` takes for checkpoint(s).

    One network (and its blend), or an ensemble's members and, for regression, its
    calibration, with a note saying what the intervals were calibrated on (or why there are
    none).

    Returns:
        ``(module or members, blend, calibration, note)``.

    Raises:
        CheckpointError: as :func:`load_members`.
    """
    sources = [sources] if isinstance(sources, str | Path) else list(sources)
    members = load_members(sources, map_location)
    if len(members) == 1:
        return members[0].module, members[0].blend, None, None
    if members[0].module.task.name != "regression":
        return members, None, None, None
    found = calibrate(members)
    if isinstance(found, str):
        return members, None, None, f"ensemble of {len(members)}: no 90% interval ({found})"
    return members, None, found, f"ensemble of {len(members)}: 90% interval by {found.note}"
