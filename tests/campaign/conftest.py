"""Tiny prepared splits and a tiny plan, as a GPU campaign would use them."""

import os
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
IMAGE_SITE = Path(__file__).resolve().parent / "image_site"
# A model and schedule small enough for seconds; the recipe otherwise as the configs give it.
TINY_ARGS = ["--model.config.num_layers", "1", "--model.config.hidden_dim", "8",
             "--model.config.ffn_dim", "8", "--model.config.num_heads", "2",
             "--data.batch_size", "4", "--trainer.max_steps", "14", "--model.total_steps", "14",
             "--model.warmup_steps", "2", "--trainer.val_check_interval", "3",
             "--trainer.check_val_every_n_epoch", "null"]


@pytest.fixture(scope="session")
def prepared(tiny_mirror, tmp_path_factory) -> Path:
    """``DIR/zinc_subset`` and ``DIR/molhiv``: prepared splits of the tiny datasets."""
    from graphormer_sepnorm.datasets import MolHIVDataModule, ZINCDataModule
    from graphormer_sepnorm.datasets.prepared import write_prepared

    folder = tmp_path_factory.mktemp("prepared")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRAPHORMER_SEPNORM_DATA_MIRROR", str(tiny_mirror))
        root = str(folder / "raw")
        write_prepared(ZINCDataModule(subset=True, root=root), folder / "zinc_subset")
        write_prepared(MolHIVDataModule(root=root), folder / "molhiv")
    return folder


def write_plan(path: Path, **top) -> Path:
    """A plan with the GPU preset: zinc_subset packed (seeds 0, 1) and unpacked (seed 2), molhiv
    as one packed replica (as the paper table's ZINC run)."""
    plan = {"name": path.stem,
            "defaults": {"presets": ["configs/presets/gpu_fast.yaml"], "args": TINY_ARGS},
            "runs": [{"dataset": "zinc_subset", "config": "configs/zinc_subset.yaml",
                      "norms": ["sepnorm"], "seeds": [0, 1], "packed": True},
                     {"dataset": "zinc_subset", "config": "configs/zinc_subset.yaml",
                      "norms": ["sharenorm"], "seeds": [2]},
                     {"dataset": "molhiv", "config": "configs/molhiv.yaml",
                      "norms": ["sepnorm"], "seeds": [0], "packed": True}], **top}
    path.write_text(yaml.safe_dump(plan))
    return path


def image_env(**extra: str) -> dict[str, str]:
    """A subprocess environment like the GPU image's: RDKit and ogb blocked, one thread."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(IMAGE_SITE), str(REPO)]),
           "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}
    env.pop("GRAPHORMER_SEPNORM_DATA_MIRROR", None)  # prepared data only
    return env | extra


# The interpreter the image's commands run in: this one, or a twin of the GPU image's Python
# (its torch, lightning, torch-geometric, torchmetrics and numpy; `make image-twin`)
PYTHON = os.environ.get("GRAPHORMER_SEPNORM_IMAGE_PYTHON", sys.executable)
