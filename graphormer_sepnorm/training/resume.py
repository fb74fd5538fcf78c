"""Exact resumption: dropout seeds that follow the step count, ``--ckpt_path last`` lookup."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback


class StepSeeding(Callback):
    """Seeds the random generators from (seed, batch count, rank) before every training batch.

    Lightning restores weights, optimizer, scheduler and loop counters from a checkpoint, but not
    the generators, and even restored generators would not line up: a resumed run draws for its
    sanity check and creates its data iterator at other moments than an uninterrupted run. As in
    fairseq (seed + update number), dropout masks here depend only on where the run is, so a run
    resumed from ``last.ckpt`` draws exactly what the uninterrupted run would have drawn, under
    DDP too (each process gets its own stream). Torch (CPU and CUDA), NumPy and Python's
    ``random`` are seeded.

    Args:
        seed: base seed; ``None`` takes ``seed_everything``'s (``$PL_GLOBAL_SEED``), else a
            random one. It is stored in checkpoints and restored with them.
    """

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Fixes the base seed at the start of a run (a resumed run then loads the saved one)."""
        if self.seed is None:
            env = os.environ.get("PL_GLOBAL_SEED")
            self.seed = int(env) if env is not None else random.SystemRandom().randrange(2**31)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                             batch: Any, batch_idx: int) -> None:
        """Seeds every generator for this batch."""
        key = [self.seed, trainer.fit_loop.total_batch_idx, trainer.global_rank]
        seed = int(np.random.SeedSequence(key).generate_state(1)[0])
        torch.manual_seed(seed)
        np.random.seed(seed)
        random.seed(seed)

    def state_dict(self) -> dict[str, Any]:
        """The base seed."""
        return {"seed": self.seed}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Takes the checkpoint's base seed."""
        self.seed = state_dict.get("seed", self.seed)


def find_last_checkpoint(root: str | Path) -> Path | None:
    """The most recently written ``last*.ckpt`` in ``root/*/checkpoints``, or ``None``.

    ``root`` is a logger's ``save_dir/name``; each run of it lives in a version folder.
    """
    candidates = [p for p in Path(root).glob("*/checkpoints/last*.ckpt") if p.is_file()]
    return max(candidates, key=lambda p: p.stat().st_mtime) if candidates else None
