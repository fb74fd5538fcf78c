"""Writes the CLI reference's generated files into ``docs/reference/generated/``.

Usage: ``python docs/cli_reference.py [OUT_DIR]``. Each file is the output of a command
(``graphormer-sepnorm fit --config X --print_config``, ``graphormer-sepnorm-predict --help``),
so the reference shows every key with its default as the installed package resolves it;
``tests/test_docs.py`` regenerates them and fails when the committed ones differ.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
#: Generated file -> the command that writes it (run from the repository root).
COMMANDS: dict[str, list[str]] = {
    "fit_zinc_subset.yaml": [str(BIN / "graphormer-sepnorm"), "fit", "--config",
                             "configs/zinc_subset.yaml", "--print_config"],
    "fit_smiles_csv.yaml": [str(BIN / "graphormer-sepnorm"), "fit", "--config",
                            "configs/smiles_csv.yaml", "--print_config"],
    "predict_help.txt": [str(BIN / "graphormer-sepnorm-predict"), "--help"],
    "hpo_help.txt": [str(BIN / "graphormer-sepnorm-hpo"), "--help"],
}


def generate(out: Path) -> None:
    """Run every command and write its standard output to ``out / <name>``."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "COLUMNS": "100", "OMP_NUM_THREADS": "1"}
    for name, command in COMMANDS.items():
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                                check=True)
        (out / name).write_text(result.stdout)


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs/reference/generated")
