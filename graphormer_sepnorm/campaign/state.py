"""A campaign's state folder: what a later command (on another machine) continues from.

    STATE/results.csv                  a row per finished run (per seed), appended
    STATE/results.md                   mean ± std per dataset and norm, rewritten
    STATE/jobs/<job>/status.json       phase (fit, test, done), steps, chunks, best per seed
    STATE/jobs/<job>/resume-<step>-meta.pt, -part<r>.pt   the fit's resume point
    STATE/jobs/<job>/best-seed<s>.ckpt  each seed's best-on-validation model (single-run format)

**The resume point** is Lightning's full checkpoint cut into pieces (:func:`split_checkpoint`):
one file per packed replica with that replica's weights and AdamW moments, and a small one with
the rest (loop counters, schedulers, callbacks, hyperparameters). A packed K=4 Graphormer-slim
fit is then four files of about 6 MB instead of one of 23.5 MB (a lent GPU returns files of at
most 16 MiB), and every file is rewritten whole: a new resume point gets new names and replaces
the old one only once ``status.json`` points to it, so a command killed while saving leaves the
previous point intact. The moments may be kept in bfloat16 (a plan's ``moments``): a third
smaller; the one rounding at each resume moves a fit slightly (it then no longer repeats an
uninterrupted run to the bit, which float32 does: ``tests/campaign``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

__all__ = ["FIELDS", "JobState", "join_checkpoint", "split_checkpoint"]

#: The results CSV's columns.
FIELDS = ["dataset", "norm", "seed", "monitor", "best_val", "best_step", "test_metric",
          "test_value", "steps", "fit_seconds", "chunks", "val_interval", "device", "commit",
          "job"]
_MARK = "\x00part:"


def split_checkpoint(ckpt: dict[str, Any], replicas: int,
                     moments: torch.dtype = torch.float32) -> tuple[dict[str, Any], list[dict]]:
    """A Lightning checkpoint as ``(meta, parts)``: ``parts[r]`` holds replica ``r``'s tensors.

    With ``replicas > 1`` (a packed fit) every ``model.*`` weight and every AdamW moment has the
    replicas along dim 0 and is cut along it; with 1, all of them go to ``parts[0]``. Moments
    are stored as ``moments``. ``meta`` keeps the rest, with markers where the tensors were.
    """
    parts: list[dict[str, Tensor]] = [{} for _ in range(replicas)]

    def take(name: str, tensor: Tensor, dtype: torch.dtype | None = None) -> str:
        tensor = tensor.detach().cpu()
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        for r, part in enumerate(parts):  # clone: a slice would save its whole storage
            part[name] = (tensor[r] if replicas > 1 else tensor).clone()
        return _MARK + name

    meta = {k: v for k, v in ckpt.items() if k not in ("state_dict", "optimizer_states")}
    meta["state_dict"] = {
        key: take(f"state_dict/{key}", value) if replicas == 1 or key.startswith("model.")
        else value.detach().cpu() for key, value in ckpt["state_dict"].items()}
    meta["optimizer_states"] = []
    for i, optimizer in enumerate(ckpt.get("optimizer_states", [])):
        state = {pid: {name: take(f"optimizer/{i}/{pid}/{name}", value, moments)
                       if isinstance(value, Tensor) and value.dim() >= 1 else value
                       for name, value in param.items()}
                 for pid, param in optimizer["state"].items()}
        meta["optimizer_states"].append({**optimizer, "state": state})
    meta["_campaign_moments"] = str(moments).removeprefix("torch.")
    return meta, parts


def join_checkpoint(meta: dict[str, Any], parts: list[dict[str, Tensor]]) -> dict[str, Any]:
    """The Lightning checkpoint :func:`split_checkpoint` cut (moments back in float32)."""
    def put(value: Any, moment: bool = False) -> Any:
        if not (isinstance(value, str) and value.startswith(_MARK)):
            return value
        name = value[len(_MARK):]
        tensors = [part[name] for part in parts]
        tensor = torch.stack(tensors) if len(parts) > 1 else tensors[0]
        return tensor.float() if moment and tensor.is_floating_point() else tensor

    ckpt = {k: v for k, v in meta.items() if k != "_campaign_moments"}
    ckpt["state_dict"] = {k: put(v) for k, v in meta["state_dict"].items()}
    ckpt["optimizer_states"] = [
        {**opt, "state": {pid: {n: put(v, moment=True) for n, v in param.items()}
                          for pid, param in opt["state"].items()}}
        for opt in meta["optimizer_states"]]
    return ckpt


def atomic_save(obj: Any, path: Path) -> None:
    """``torch.save`` to a temporary name, then a rename: never a half-written file."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def atomic_write_text(text: str, path: Path) -> None:
    """Writes ``text`` to a temporary name, then renames it to ``path``."""
    atomic_write_bytes(text.encode(), path)


def atomic_write_bytes(data: bytes, path: Path) -> None:
    """Writes ``data`` to a temporary name, then renames it to ``path``."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class JobState:
    """One job's folder: its status, resume point and best checkpoints.

    Args:
        folder: ``STATE/jobs/<job name>``.
        recipe: the job's ``graphormer-sepnorm`` arguments; a folder made for another recipe
            is refused (its state would continue a different fit).
    """

    def __init__(self, folder: Path, recipe: list[str]) -> None:
        self.folder = folder
        path = folder / "status.json"
        self.status: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {
            "recipe": recipe, "phase": "fit", "chunks": 0, "fit_seconds": 0.0, "steps": 0,
            "resume": None, "best": {}, "history": [], "val_interval": None, "failures": 0,
            "failed_commit": None, "chunk_log": []}
        if self.status["recipe"] != recipe:
            raise ValueError(f"{folder} was made for another recipe ({self.status['recipe']}); "
                             f"restore the plan, or delete the folder to start this job over")

    @property
    def phase(self) -> str:
        """``'fit'``, ``'test'`` (fit finished, the tests not yet run) or ``'done'``."""
        return self.status["phase"]

    def save_status(self) -> None:
        """Writes ``status.json`` (atomically)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(json.dumps(self.status, indent=1), self.folder / "status.json")

    def best_path(self, seed: int) -> Path:
        """Where seed ``seed``'s best model is kept."""
        return self.folder / f"best-seed{seed}.ckpt"

    def save_best(self, seed: int, checkpoint: dict[str, Any]) -> None:
        """Keeps ``checkpoint`` as seed ``seed``'s best model."""
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_save(checkpoint, self.best_path(seed))

    def write_resume(self, ckpt: dict[str, Any], replicas: int, moments: torch.dtype) -> None:
        """Saves a resume point and points ``status.json`` to it; then drops the previous one."""
        self.folder.mkdir(parents=True, exist_ok=True)
        meta, parts = split_checkpoint(ckpt, replicas, moments)
        tag = f"resume-{ckpt['global_step']}"
        for r, part in enumerate(parts):
            atomic_save(part, self.folder / f"{tag}-part{r}.pt")
        atomic_save(meta, self.folder / f"{tag}-meta.pt")
        old, self.status["resume"] = self.status["resume"], {"tag": tag, "parts": len(parts)}
        self.status["steps"] = int(ckpt["global_step"])
        self.save_status()
        if old and old["tag"] != tag:
            self._drop_resume(old)

    def read_resume(self) -> dict[str, Any] | None:
        """The saved resume point as a Lightning checkpoint, or ``None``."""
        point = self.status["resume"]
        if point is None:
            return None
        load = {"map_location": "cpu", "weights_only": True}
        parts = [torch.load(self.folder / f"{point['tag']}-part{r}.pt", **load)
                 for r in range(point["parts"])]
        return join_checkpoint(torch.load(self.folder / f"{point['tag']}-meta.pt", **load), parts)

    def _drop_resume(self, point: dict[str, Any]) -> None:
        for path in self.folder.glob(f"{point['tag']}-*.pt"):
            path.unlink()

    def finish(self, seeds: list[int], keep: list[int]) -> None:
        """Marks the job done, drops its resume point and the best models of seeds not kept."""
        if self.status["resume"]:
            self._drop_resume(self.status["resume"])
        self.status.update(phase="done", resume=None)
        self.save_status()
        for seed in seeds:
            if seed not in keep:
                self.best_path(seed).unlink(missing_ok=True)


def remove_tree(path: Path) -> None:
    """Deletes a folder if it exists."""
    shutil.rmtree(path, ignore_errors=True)
