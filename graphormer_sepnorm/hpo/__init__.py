"""``graphormer-sepnorm-hpo``: a hyperparameter search with Optuna, resumable, in workers.

Each trial is one ``graphormer-sepnorm fit`` process, in ``runs/hpo/<name>/trial_XXXX/``, with
the trial's values as command-line overrides of the recipe; the study is one file,
``runs/hpo/<name>/study.journal`` (or a database), that any number of workers, on this machine
or in a SLURM array, share. Running the same command again continues the study; a trial whose
worker died is continued from its ``last.ckpt``. The modules:

- :mod:`~graphormer_sepnorm.hpo.command`: the command and its SLURM array;
- :mod:`~graphormer_sepnorm.hpo.workers`: the workers: claim a trial, run its fit, tell its end;
- :mod:`~graphormer_sepnorm.hpo.space`: search spaces (YAML of the CLI's keys and ranges);
- :mod:`~graphormer_sepnorm.hpo.study`: the storage, claims, heartbeats and stale trials;
- :mod:`~graphormer_sepnorm.hpo.pruning`: the callback each trial's fit reports through;
- :mod:`~graphormer_sepnorm.hpo.results`: ``trials.csv``, ``best.yaml``, ``importances.csv``.

Optuna is an optional dependency: ``pip install 'graphormer-sepnorm[hpo]'``.
"""

from __future__ import annotations

import sys

#: What the command says when Optuna is missing.
INSTALL = ("graphormer-sepnorm-hpo needs Optuna, an optional dependency: "
           "pip install 'graphormer-sepnorm[hpo]' (or pip install optuna)")


def run() -> None:
    """Console entry point ``graphormer-sepnorm-hpo``; exits with the command's status."""
    try:
        import optuna  # noqa: F401
    except ImportError:
        print(INSTALL, file=sys.stderr)
        sys.exit(2)
    from graphormer_sepnorm.hpo.command import main

    sys.exit(main())
