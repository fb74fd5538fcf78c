"""What git tracks: no run state (checkpoints, tensors) besides the bundled models."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_no_checkpoint_or_tensor_is_tracked_outside_the_bundled_models():
    tracked = subprocess.run(["git", "ls-files", "*.ckpt", "*.pt"], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout.split()
    assert tracked  # the bundled models: git answered, from this checkout
    outside = [p for p in tracked if not p.startswith("graphormer_sepnorm/checkpoints/")]
    assert outside == []
