"""Starting a model from another checkpoint's weights (``--model.init_from PATH``).

Every parameter and buffer whose name and shape match is copied; the rest start afresh. Only
the :data:`FREE_FIELDS` of the configs may differ.

Examples:
    >>> from graphormer_sepnorm.nn.config import GraphormerConfig
    >>> a = GraphormerConfig(num_layers=2, hidden_dim=16, dropout=0.0)
    >>> architecture_differences(a, a.replace(num_tasks=3, dropout=0.2))
    []
    >>> architecture_differences(a, a.replace(num_layers=4))
    ['num_layers (checkpoint 2, this model 4)']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from torch import Tensor, nn

from graphormer_sepnorm.checkpoints import (
    BUNDLED_CHECKPOINTS,
    bundled_checkpoint_path,
    read_checkpoint,
)
from graphormer_sepnorm.nn.config import GraphormerConfig

#: Config fields that may differ between a checkpoint and the model it initializes.
FREE_FIELDS = frozenset({"num_tasks", "atom_feature_dims", "edge_feature_dims", "dropout",
                         "attention_dropout", "activation_dropout", "sync_batch_norm",
                         "mol_feature_dim", "head_hidden_dim", "extra_feature_dim"})


def architecture_differences(source: GraphormerConfig, target: GraphormerConfig) -> list[str]:
    """The fields outside :data:`FREE_FIELDS` where ``source`` and ``target`` differ, in words."""
    a, b = source.to_dict(), target.to_dict()
    return [f"{key} (checkpoint {a[key]}, this model {b[key]})" for key in a
            if key not in FREE_FIELDS and a[key] != b[key]]


@dataclass
class InitReport:
    """What :func:`init_model_from` copied.

    Attributes:
        path: The checkpoint.
        loaded: Names of the tensors copied.
        reshaped: ``name: checkpoint shape -> model shape`` of those left fresh.
        absent: Names of this model's tensors the checkpoint lacks.
    """

    path: str
    loaded: list[str] = field(default_factory=list)
    reshaped: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        total = len(self.loaded) + len(self.reshaped) + len(self.absent)
        lines = [f"init_from {self.path}: loaded {len(self.loaded)} of {total} model tensors"]
        if self.reshaped:
            lines.append("  kept fresh (shape differs): " + "; ".join(self.reshaped))
        if self.absent:
            lines.append("  kept fresh (not in the checkpoint): " + ", ".join(self.absent))
        return "\n".join(lines)


def init_model_from(model: nn.Module, path: str | Path) -> InitReport:
    """Copies the matching weights of checkpoint ``path``'s model into ``model``.

    Args:
        model: A :class:`~graphormer_sepnorm.nn.model.Graphormer` (with ``config``).
        path: A checkpoint of a :class:`~graphormer_sepnorm.training.module.GraphormerModule`
            (read with ``weights_only=True``), or the name of a bundled one
            (``'pretrained'``: the descriptor-pretrained start of ``configs/smiles_csv.yaml``).

    Returns:
        What was copied and what was left fresh.

    Raises:
        FileNotFoundError: No such file.
        ValueError: Not a Graphormer checkpoint, or a model of another architecture.
    """
    if not Path(path).is_file() and str(path) in BUNDLED_CHECKPOINTS:
        path = bundled_checkpoint_path(str(path))
    if not Path(path).is_file():
        raise FileNotFoundError(f"init_from: checkpoint not found: {path}")
    checkpoint = read_checkpoint(path)
    config = (checkpoint.get("hyper_parameters") or {}).get("config")
    if config is None or "state_dict" not in checkpoint:
        raise ValueError(f"init_from: {path} is not a Graphormer checkpoint (no model config "
                         "in its hyper_parameters, or no state_dict)")
    differences = architecture_differences(GraphormerConfig.from_dict(config), model.config)
    if differences:
        raise ValueError(f"init_from: the model in {path} has another architecture: "
                         f"{'; '.join(differences)}. Only {', '.join(sorted(FREE_FIELDS))} may "
                         "differ; set the others as the checkpoint has them")
    source = {key.removeprefix("model."): value for key, value in
              checkpoint["state_dict"].items() if key.startswith("model.")}
    report = InitReport(str(path))
    _copy_matching(model, source, report)
    return report


def _copy_matching(model: nn.Module, source: dict[str, Tensor], report: InitReport) -> None:
    """Loads the tensors of ``source`` whose name and shape ``model`` has; notes the rest."""
    matched = {}
    for name, tensor in model.state_dict().items():
        if name not in source:
            report.absent.append(name)
        elif source[name].shape != tensor.shape:
            report.reshaped.append(f"{name}: {list(source[name].shape)} -> "
                                   f"{list(tensor.shape)}")
        else:
            matched[name] = source[name]
            report.loaded.append(name)
    model.load_state_dict(matched, strict=False)
