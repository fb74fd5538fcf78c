"""``graphormer-sepnorm test --ckpt_path X`` with no config: the data settings come from X.

:func:`with_checkpoint_data` puts ``--data <X's datamodule_hyper_parameters>`` first on the
command line, so that a ``--config`` and options after it still override them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from graphormer_sepnorm.checkpoints import read_checkpoint

EVALUATING = ("validate", "test", "predict")
# set by the CLI's links from the model's arguments, so not given on the command line
LINKED = {"multi_hop_max_dist", "replica_seeds"}


def _option(args: list[str], name: str) -> str | None:
    """The value of ``--name X`` or ``--name=X`` (the last one given), else ``None``."""
    value = None
    for k, arg in enumerate(args):
        if arg == name and k + 1 < len(args):
            value = args[k + 1]
        elif arg.startswith(f"{name}="):
            value = arg.split("=", 1)[1]
    return value


def _gives_data(args: list[str]) -> bool:
    return any(a in ("--data", "--data.class_path") or a.startswith(("--data=",
               "--data.class_path=")) for a in args)


def checkpoint_data(path: str | Path) -> dict[str, Any] | None:
    """``{'class_path': ..., 'init_args': {...}}`` of the datamodule a checkpoint was fit on."""
    return payload_data(read_checkpoint(path, mmap=True))


def payload_data(payload: dict[str, Any]) -> dict[str, Any] | None:
    """:func:`checkpoint_data` of a checkpoint already read; ``None`` if it records none.

    The settings the CLI links from the model (``LINKED``) are left out.
    """
    hparams = payload.get("datamodule_hyper_parameters") or {}
    if "_class_path" not in hparams:
        return None
    init = {k: v for k, v in hparams.items() if not k.startswith("_") and k not in LINKED}
    return {"class_path": hparams["_class_path"], "init_args": init}


def with_checkpoint_data(args: list[str]) -> list[str]:
    """``args`` with ``--data <the checkpoint's datamodule>`` after the subcommand, if needed.

    Only for ``validate``/``test``/``predict`` with ``--ckpt_path`` naming a file whose
    checkpoint records its datamodule, and no ``--data`` or ``--data.class_path`` given.
    Without a ``--config`` or ``--trainer.logger``, the run logs into the checkpoint's run
    folder (:func:`run_logger`).
    """
    if not args or args[0] not in EVALUATING or _gives_data(args[1:]):
        return args
    ckpt = _option(args[1:], "--ckpt_path")
    if ckpt is None or not Path(ckpt).is_file():
        return args
    data = checkpoint_data(ckpt)
    if data is None:
        return args
    logger = []
    if not any(a.startswith(("--config", "--trainer.logger")) for a in args[1:]):
        logger = ["--trainer.logger", json.dumps(run_logger(Path(ckpt), args[0]))]
    return [args[0], "--data", json.dumps(data), *logger, *args[1:]]


def run_logger(checkpoint: Path, subcommand: str) -> dict[str, Any]:
    """A CSV logger writing into the checkpoint's run folder, ``<run>/<subcommand>/version_k``.

    So that ``test --ckpt_path X`` without a config logs beside the fit, not to
    ``./lightning_logs``.
    """
    folder = checkpoint.parent
    if folder.name in ("checkpoints", "replicas"):
        folder = folder.parent
    return {"class_path": "lightning.pytorch.loggers.CSVLogger",
            "init_args": {"save_dir": str(folder), "name": subcommand}}


def missing_data_file(config: Any) -> str | None:
    """The error for a datamodule ``path`` that does not exist, else ``None``.

    A file for CSV data, a folder for prepared splits.
    """
    data = config.get("data")
    init = getattr(data, "init_args", None)
    path = init.get("path") if init is not None and hasattr(init, "get") else None
    if path is None or Path(path).exists():
        return None
    return (f"data not found: {path} (recorded in the checkpoint or config; moved? pass its "
            f"location with --data.path NEW)")
