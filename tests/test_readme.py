"""Every command of the README runs here, in a workspace laid out like a checkout, on tiny data.

The README's shell blocks are read section by section and each command runs as written, with
these substitutions, appended (the last value of a key wins) or named in :func:`adapt`:

- training commands get a tiny model and a few steps (:data:`TINY`), except the own-data
  recipe (``--config smiles_csv``), whose architecture is the bundled pretrained model's and
  whose 3 epochs run as written;
- the GPU preset runs on the CPU without ``torch.compile`` (its compiled step on the CPU is
  ``tests/test_experiment.py``'s packed grid) and DDP runs two CPU processes on one node;
- ``srun`` is left out (Lightning reads SLURM's environment, which a test has not got), and
  ``sbatch FILE`` checks the script instead of submitting it;
- a ``*`` in an argument is expanded in the workspace, as the shell would;
- ``make TARGET`` is ``make -n TARGET`` (``make test`` is what runs this file), and the install
  block must be the Makefile's recipe, which CI runs on a fresh clone.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tiny_data import SMILES, own_csv

from graphormer_sepnorm import experiment, predict
from graphormer_sepnorm.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TINY = ["--model.config.num_layers", "2", "--model.config.hidden_dim", "16",
        "--model.config.ffn_dim", "16", "--model.config.num_heads", "4",
        "--data.batch_size", "4", "--trainer.max_steps", "4", "--model.total_steps", "4",
        "--model.warmup_steps", "1", "--trainer.val_check_interval", "2",
        "--trainer.check_val_every_n_epoch", "null"]
QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
#: A section of the README with shell commands -> the test below that runs them.
SECTIONS = {"Install": "test_install_and_make", "Train on": "test_train",
            "Your own molecules": "test_own_molecules", "Predict on": "test_predict",
            "Scale out": "test_scale_out"}


def sections() -> dict[str, list[list[str]]]:
    """The README's shell commands, as argument lists, by the heading of their section."""
    found: dict[str, list[list[str]]] = {}
    text = README.read_text()
    assert not re.findall(r"^```(?:sh|shell|console|bash\S+)\n", text, re.M)  # all ```bash
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        heading = part.splitlines()[0]
        for block in re.findall(r"```bash\n(.*?)```", part, re.S):
            for line in block.replace("\\\n", " ").splitlines():
                if argv := shlex.split(line, comments=True):
                    found.setdefault(heading, []).append(argv)
    return found


def commands(prefix: str) -> list[list[str]]:
    """The commands of the one section whose heading starts with ``prefix``."""
    (heading,) = [h for h in sections() if h.startswith(prefix)]
    return sections()[heading]


def option(argv: list[str], key: str) -> str | None:
    """The last value of ``--key value`` in ``argv``."""
    values = [argv[k + 1] for k, a in enumerate(argv[:-1]) if a == key]
    return values[-1] if values else None


def adapt(argv: list[str]) -> list[str]:
    """A ``graphormer-sepnorm`` command's arguments as this test runs them (see above)."""
    args = list(argv[1:])
    if not {"configs/smiles_csv.yaml", "smiles_csv"} & set(args):
        args += TINY
    if "configs/presets/gpu_fast.yaml" in args:
        args += ["--model.compile", "null"]
    if option(args, "--trainer.strategy") == "ddp":
        args += ["--trainer.devices", "2", "--trainer.accelerator", "cpu"]
    if option(args, "--trainer.num_nodes") is not None:
        args += ["--trainer.num_nodes", "1"]
    return args + QUIET


@pytest.fixture
def workspace(tmp_path, tiny_mirror, monkeypatch) -> Path:
    """A folder laid out like a checkout (configs/, examples/), the working directory."""
    for name in ("configs", "examples"):
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GRAPHORMER_SEPNORM_DATA_MIRROR", str(tiny_mirror))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr("sys.argv", ["graphormer-sepnorm"])
    return tmp_path


def run(argv: list[str]):
    """Runs one README command (see the module's docstring).

    Returns:
        The CLI object of an in-process ``graphormer-sepnorm``, the standard error of a DDP run,
        ``make -n``'s output, the text of an ``sbatch`` script, or ``None``.
    """
    argv = [_glob(a) for a in argv]
    program = argv[0]
    if program == "srun":
        return run(argv[1:])
    if program == "make":
        done = subprocess.run(["make", "-n", *argv[1:]], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0 and done.stdout, done.stderr
        return done.stdout
    if program == "sbatch":
        script = Path(argv[-1])
        assert script.is_file()
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
        return script.read_text()
    if program == "graphormer-sepnorm-predict":
        assert predict.main(argv[1:]) == 0
        return None
    if program == "graphormer-sepnorm-experiment":
        assert experiment.main(argv[1:]) == 0
        return None
    assert program == "graphormer-sepnorm", f"a README command this test cannot run: {argv}"
    args = adapt(argv)
    if option(args, "--trainer.strategy") != "ddp":
        return main(args)
    # Lightning's ddp launcher starts the other process by re-running the command line
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-m", "graphormer_sepnorm.cli", *args], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def _glob(arg: str) -> str:
    """``arg`` with a ``*`` expanded in the working directory, which must match one file."""
    if "*" not in arg:
        return arg
    (match,) = Path().glob(arg)
    return str(match)


def test_every_section_with_commands_has_its_test():
    assert sorted(h.split()[0] for h in sections()) == sorted(
        p.split()[0] for p in SECTIONS)
    assert all(name in globals() for name in SECTIONS.values())


def test_install_and_make():
    """The install block is the Makefile's venv recipe, variables expanded; make knows demo/test."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^\$\(BIN\)/activate:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    expand = {"$(PYTHON)": "python3", "$(VENV)": ".venv", "$(BIN)": ".venv/bin",
              "$(PIP)": ".venv/bin/pip install -c constraints.txt"}
    lines = []
    for line in recipe.strip().splitlines():
        for key, value in expand.items():
            line = line.replace(key, value)
        lines.append(shlex.split(line))
    install = [argv for argv in commands("Install") if argv[0] != "make"]
    assert install == [argv for argv in lines if argv[0] != "touch"]
    for argv in commands("Install"):
        if argv[0] == "make":
            assert argv[1] in {"demo", "test"} and run(argv)


def test_train(workspace):
    results = [run(argv) for argv in commands("Train on")]
    fit, test, sharenorm, packed = results
    best = Path(fit.trainer.checkpoint_callback.best_model_path)
    assert fit.trainer.state.finished and best.is_file()
    assert Path(test.trainer.ckpt_path).resolve() == best.resolve()
    assert "test/mae" in test.trainer.callback_metrics
    norms = {type(m).__name__ for m in sharenorm.model.model.modules()}
    assert "ShareNorm" in norms and "SepNorm" not in norms
    replicas = sorted(p.name for p in workspace.glob("runs/**/replicas/seed*.ckpt"))
    assert replicas == [f"seed{s}.ckpt" for s in range(4)]
    assert packed.model.seeds == [0, 1, 2, 3]


def test_own_molecules(workspace):
    own_csv(workspace / "my.csv", rows=40)
    (workspace / "new.csv").write_text("smiles\n" + "\n".join(SMILES[:6]) + "\n")
    fit, test, _ = (run(argv) for argv in commands("Your own molecules"))
    best = Path(fit.trainer.checkpoint_callback.best_model_path)
    assert fit.trainer.state.finished and "test/mae" in test.trainer.callback_metrics
    assert Path(test.trainer.ckpt_path).resolve() == best.resolve()
    out = pd.read_csv(workspace / "new_preds.csv", keep_default_na=False)
    assert list(out["smiles"]) == SMILES[:6] and (out["error"] == "").all()
    for column in ("logS", "logS_std", "logS_lo90", "logS_hi90"):
        assert np.isfinite(out[column]).all()
    assert (out["logS_lo90"] < out["logS"]).all() and (out["logS"] < out["logS_hi90"]).all()


def test_predict(workspace):
    for argv in commands("Predict on"):
        run(argv)
    rows = len((ROOT / "examples" / "molecules.smi").read_text().splitlines())
    hiv = pd.read_csv(workspace / "hiv_preds.csv", keep_default_na=False)
    good = hiv["error"] == ""
    assert len(hiv) == rows and 0 < good.sum() < rows  # the examples' bad rows are flagged
    assert pd.to_numeric(hiv["hiv_active_probability"][good]).between(0, 1).all()
    zinc = pd.read_csv(workspace / "zinc_preds.csv", keep_default_na=False)
    zinc_good = zinc["error"] == ""
    assert len(zinc) == rows and not (zinc_good & ~good).any()
    assert (good & ~zinc_good).any()  # a salt's sodium is outside the ZINC vocabulary
    assert zinc["error"][good & ~zinc_good].str.contains("not in the ZINC vocabulary").all()
    embeddings = np.load(workspace / "zinc_embeddings.npy")  # a row per input, NaN if flagged
    assert embeddings.shape == (rows, 64)  # the bundled ZINC model is the 10-minute preset's
    assert list(np.isfinite(embeddings).all(axis=1)) == list(zinc_good)


def test_scale_out(workspace):
    results = [run(argv) for argv in commands("Scale out")]
    ddp, many_nodes, _, array, resumable = results
    for log in (ddp, many_nodes):  # Lightning 2.6's messages
        assert "Starting with 2 processes" in log
    assert "Restoring states from the checkpoint path at runs/zinc/version_0" in many_nodes
    assert "#SBATCH --array=0-3" in array  # 2 datasets x 2 norms, the 4 seeds of each packed
    assert "#SBATCH --time=04:00:00" in array and "#SBATCH --gres=gpu:1" in array
    fits = [line for line in array.splitlines() if " graphormer_sepnorm.cli fit " in line]
    tests = [line for line in array.splitlines() if " graphormer_sepnorm.cli test " in line]
    assert len(fits) == 4 and all("--ckpt_path last" in fit for fit in fits)
    assert all(fit.endswith("--model.seeds '[0, 1, 2, 3]' --trainer.max_time 00:03:45:00")
               for fit in fits)
    assert len(tests) == 16 and all(re.search(r"--ckpt_path \S+/replicas/seed[0-3]\.ckpt$", t)
                                    for t in tests)  # each replica's best
    assert array.splitlines()[-1].startswith('"$PYTHON" -m graphormer_sepnorm.experiment --gather')
    assert resumable.trainer.global_step == 4
    again = main(adapt(commands("Scale out")[-1]))  # the same command again: continues, done
    assert again.trainer.global_step == 4 and again.trainer.log_dir == resumable.trainer.log_dir


def python_blocks(page: Path, section: str | None = None) -> list[str]:
    """The ```python blocks of a Markdown page (of its ``## section`` only), in order.

    Each is padded with the newlines before it, so that a traceback gives the page's line.
    """
    text = page.read_text()
    start, end = 0, len(text)
    if section is not None:
        start = re.search(rf"^## {re.escape(section)}$", text, re.M).end()
        after = re.search(r"^## ", text[start:], re.M)
        end = start + after.start() if after else end
    return ["\n" * text[:m.start(1)].count("\n") + m.group(1)
            for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M)
            if start <= m.start() < end]


def run_python_blocks(page: Path, section: str | None = None) -> dict:
    """Runs :func:`python_blocks` one after the other in one namespace, and returns it."""
    blocks = python_blocks(page, section)
    assert blocks, f"{page} has no python block" + (f" under ## {section}" if section else "")
    namespace: dict = {"__name__": "__page__"}
    for block in blocks:
        exec(compile(block, str(page), "exec"), namespace)
    return namespace


def test_readme_python_example_runs():
    namespace = run_python_blocks(README, "In Python")
    assert tuple(namespace["predictions"].shape) == (3, 1)
    assert tuple(namespace["embeddings"].shape) == (3, 80)
    assert len(namespace["attention"]) == 12
