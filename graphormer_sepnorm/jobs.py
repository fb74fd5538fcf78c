"""Fits run as child processes, and SLURM array scripts: what the grid and the search share.

:mod:`~graphormer_sepnorm.experiment` (a grid of datasets, norms and seeds) and
:mod:`~graphormer_sepnorm.hpo` (a hyperparameter search) both run each fit as a
``graphormer-sepnorm`` process of its own, in a run folder of its own, continued from its
``last.ckpt``, within a time given as ``DD:HH:MM:SS``, and both write SLURM job arrays.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

#: ``python`` arguments that run the ``graphormer-sepnorm`` command.
CLI = ["-m", "graphormer_sepnorm.cli"]


def logger_args(folder: Path, version: str | None = None) -> list[str]:
    """CLI arguments that log a run (a CSVLogger) into ``folder`` (``save_dir/name``).

    With ``version``, into ``folder/version``, where ``--ckpt_path last`` finds the run's
    ``last.ckpt`` again.
    """
    out = ["--trainer.logger.class_path", "lightning.pytorch.loggers.CSVLogger",
           "--trainer.logger.init_args.save_dir", str(folder.parent),
           "--trainer.logger.init_args.name", folder.name]
    return out + (["--trainer.logger.init_args.version", version] if version else [])


def duration(seconds: float) -> str:
    """``DD:HH:MM:SS`` (Lightning's ``max_time`` format) of whole ``seconds``."""
    minutes, secs = divmod(max(int(seconds), 0), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours // 24:02d}:{hours % 24:02d}:{minutes:02d}:{secs:02d}"


def seconds(text: str) -> int:
    """The seconds of ``DD:HH:MM:SS``."""
    days, hours, minutes, secs = (int(x) for x in text.split(":"))
    return ((days * 24 + hours) * 60 + minutes) * 60 + secs


def spawn(cmd: list[str], log: Path,
          env: Mapping[str, str] | None = None) -> tuple[int, float | None]:
    """Runs ``python cmd`` with its output in ``log``; its exit status and peak RSS in MB.

    Args:
        cmd: the arguments after ``python``.
        log: the file that gets its standard output and error.
        env: the child's environment (default: this process's).

    Returns:
        The exit status (negative: killed by that signal), and the peak RSS of the process and
        its children, where ``os.wait4`` measures it (else ``None``).
    """
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, *cmd], stdout=out, stderr=subprocess.STDOUT,
                                env=None if env is None else dict(env))
        if not hasattr(os, "wait4"):
            return proc.wait(), None
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_maxrss / 1024  # KiB on Linux


def slurm_preamble(name: str, folder: Path, tasks: int, sbatch: Sequence[str],
                   comment: Sequence[str]) -> list[str]:
    """The first lines of a job array of ``tasks`` tasks, up to ``PYTHON=``.

    Args:
        name: the job's name.
        folder: where the tasks' ``slurm-<job>_<task>.out`` go.
        tasks: the array's size.
        sbatch: further ``#SBATCH`` options without their dashes (``time=04:00:00``).
        comment: lines saying what the script does (each becomes a ``#`` comment).

    Returns:
        The ``#SBATCH`` lines, the comment, ``set -euo pipefail``, ``cd`` to this folder, and
        ``PYTHON`` (this interpreter unless the environment sets it).
    """
    return ["#!/bin/bash", f"#SBATCH --job-name={name}", f"#SBATCH --array=0-{tasks - 1}",
            f"#SBATCH --output={folder}/slurm-%A_%a.out",
            *(f"#SBATCH --{option}" for option in sbatch), *(f"# {line}" for line in comment),
            "set -euo pipefail", f"cd {shlex.quote(os.getcwd())}",
            f"PYTHON=${{PYTHON:-{shlex.quote(sys.executable)}}}"]
