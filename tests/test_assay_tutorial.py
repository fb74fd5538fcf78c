"""The commands of docs/tutorials/assay_tables.md, run as written on tiny tables of its shape.

Fits get a 2-layer model from scratch and 2 epochs (appended: the last value of a key wins);
the grid gets 3 folds instead of 5 and its fits the same through ``--extra``; a ``*`` is
expanded as the shell would.
"""

import re
import shlex
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tiny_data import SMILES

from graphormer_sepnorm import experiment, predict
from graphormer_sepnorm.cli import main

PAGE = Path(__file__).resolve().parents[1] / "docs" / "tutorials" / "assay_tables.md"
TINY = ["--model.config.num_layers", "2", "--model.init_from", "none", "--data.batch_size", "8",
        "--trainer.max_epochs", "2", "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false", "--data.mol_features", "[morgan]"]
ASSAYS = ["NR-AR", "NR-AhR", "SR-ARE"]


def commands() -> list[list[str]]:
    """The page's shell commands, continuation lines joined."""
    blocks = re.findall(r"```bash\n(.*?)```", PAGE.read_text(), re.S)
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    return [shlex.split(line) for line in lines if line.strip()]


def expand(args: list[str]) -> list[str]:
    out = []
    for arg in args:
        out += sorted(str(p) for p in Path().glob(arg)) if "*" in arg else [arg]
    return out


@pytest.fixture
def tables(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["graphormer-sepnorm"])
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    rows = []
    for i, s in enumerate(SMILES * 2):
        labels = ["" if (i + k) % 3 == 0 else (i // (k + 1)) % 2 for k in range(3)]
        rows.append([s, *labels, f"{0.1 * i:.1f}"])
    pd.DataFrame(rows, columns=["smiles", *ASSAYS, "clogp"]).to_csv("assays.csv", index=False)
    grades = pd.DataFrame({"smiles": SMILES * 2, "grade": [i % 3 for i in range(2 * len(SMILES))]})
    grades.to_csv("grades.csv", index=False)
    Path("new.csv").write_text("smiles\n" + "\n".join(SMILES[:5]) + "\n")
    return tmp_path


def test_the_tutorials_commands_run_as_written(tables):
    runs = []
    for argv in commands():
        program, args = argv[0], expand(argv[1:])
        if program == "graphormer-sepnorm":
            runs.append(main(args + TINY))
        elif program == "graphormer-sepnorm-experiment":
            budget = ["--accelerator", "cpu", "--max-epochs", "2", "--folds", "3"]
            extra = args.index("--extra")
            assert experiment.main(args[:extra] + budget + args[extra:] + TINY) == 0
        else:
            assert program == "graphormer-sepnorm-predict", argv
            assert predict.main(args + ["--no-progress"]) == 0
    binary, grades, described = runs
    assert binary.trainer.checkpoint_callback.monitor == "val/roc_auc"
    assert "val/roc_auc_NR-AhR" in binary.trainer.callback_metrics
    assert grades.model.task.name == "multiclass" and grades.model.task.num_classes == 3
    assert described.model.dataset_info["feature_columns"] == ["clogp"]
    table = Path("results/assays_cv.md").read_text()
    assert "| test/roc_auc_SR-ARE |" in table and "--checkpoint" in table
    out = pd.read_csv("new_preds.csv", keep_default_na=False)
    probabilities = [f"{a}_probability" for a in ASSAYS]
    assert list(out.columns) == ["smiles", *probabilities, *[f"{p}_std" for p in probabilities],
                                 "error"]
    assert (out["error"] == "").all() and np.isfinite(out[probabilities].to_numpy()).all()
    assert (out[[f"{p}_std" for p in probabilities]].to_numpy() > 0).any()  # 3 fold models
