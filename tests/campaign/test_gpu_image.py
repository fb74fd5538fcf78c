"""Training needs torch, lightning, torch-geometric, torchmetrics and jsonargparse; not RDKit, ogb.

Each test runs a fresh interpreter in which importing RDKit or ogb fails from its first line
(``image_site/sitecustomize.py``), as on the lent GPU's image, so an import anywhere in the
package's training path fails the test, also one hidden behind another module.
"""

import re
import subprocess

from conftest import PYTHON, REPO, image_env


def run(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, *args], cwd=REPO, env=image_env(**env), capture_output=True,
                          text=True, timeout=600)


def test_the_blocker_blocks():
    out = run("-c", "import rdkit")
    assert out.returncode != 0 and "not on the GPU image" in out.stderr
    assert run("-c", "import ogb.utils").returncode != 0


def test_fit_from_prepared_splits(prepared, tmp_path):
    out = run("-m", "graphormer_sepnorm.cli", "fit", "--config", "configs/zinc_subset.yaml",
              "--config", "configs/presets/gpu_fast.yaml",
              "--data", "graphormer_sepnorm.datasets.PreparedDataModule",
              "--data.path", str(prepared / "zinc_subset"), "--model.config.num_layers", "1",
              "--model.config.hidden_dim", "8", "--model.config.ffn_dim", "8",
              "--model.config.num_heads", "2", "--data.batch_size", "4",
              "--trainer.max_steps", "3", "--model.total_steps", "3", "--model.warmup_steps", "1",
              "--trainer.val_check_interval", "3",
              "--trainer.accelerator", "cpu", "--trainer.logger.init_args.save_dir",
              str(tmp_path / "runs"), "--trainer.default_root_dir", str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "fit finished after" in out.stdout
    assert "test of the best checkpoint: test/mae" in out.stdout


def test_gpu_step_benchmark_on_synthetic_molecules():
    out = run("benchmarks/gpu_step.py", "--synthetic", "40", "--steps", "2", "--warmup", "1",
              "--batch-scale", "0.04", "--layers", "2", "--hops", "5", "--k", "1", "2",
              "--datasets", "zinc_subset")
    assert out.returncode == 0, out.stderr[-3000:]
    assert re.search(r"^gpu_step device=cpu steps_per_s=[\d.]+ packed_k=[12] ", out.stdout, re.M)
