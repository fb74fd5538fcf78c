"""What a study leaves beside its journal: ``trials.csv``, ``best.yaml``, ``importances.csv``.

Rewritten after every trial a worker tells (under the claim lock), so they are current while
the search runs and complete when it ends:

- ``trials.csv``: one row a trial: its number, state, value (the objective), the objective's
  name, each parameter, the epochs it ran, its start, end and seconds, its fit's peak RSS;
- ``best.yaml``: the best finished trial's values as a config that stacks on the recipe,
  ``graphormer-sepnorm fit --config RECIPE --config best.yaml ...``, with the command that
  refits it in its first lines;
- ``importances.csv``: each parameter's importance for the objective over the finished trials
  (Optuna's default evaluator), once two trials have finished.
"""

from __future__ import annotations

import csv
import os
import shlex
import warnings
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import FrozenTrial, TrialState

from graphormer_sepnorm.hpo.space import stacked

__all__ = ["FIELDS", "trial_rows", "write_best", "write_importances", "write_reports",
           "write_trials"]

#: The columns of ``trials.csv`` before the parameters'.
FIELDS = ["number", "state", "value", "metric", "epochs", "start", "end", "seconds",
          "peak_rss_mb"]


def _atomic(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(text)
    os.replace(partial, path)


def _time(trial: FrozenTrial, name: str) -> str:
    value = getattr(trial, name)
    return "" if value is None else value.isoformat(timespec="seconds")


def trial_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """One row a trial (see the module docstring); parameters by their keys."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        if t.state == TrialState.WAITING:
            continue
        seconds = ("" if t.datetime_start is None or t.datetime_complete is None else
                   round((t.datetime_complete - t.datetime_start).total_seconds(), 1))
        rows.append({"number": t.number, "state": t.state.name,
                     "value": "" if t.value is None else t.value,
                     "metric": t.user_attrs.get("metric", ""),
                     "epochs": t.last_step + 1 if t.last_step is not None else "",
                     "start": _time(t, "datetime_start"), "end": _time(t, "datetime_complete"),
                     "seconds": seconds, "peak_rss_mb": t.user_attrs.get("peak_rss_mb", ""),
                     **t.params})
    return rows


def write_trials(study: optuna.Study, path: Path) -> None:
    """``trials.csv``: :func:`trial_rows` with the parameters after :data:`FIELDS`."""
    rows = trial_rows(study)
    params = list(dict.fromkeys(k for r in rows for k in r if k not in FIELDS))
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    with open(partial, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS + params, restval="")
        writer.writeheader()
        writer.writerows(rows)
    os.replace(partial, path)


def write_best(study: optuna.Study, path: Path) -> FrozenTrial | None:
    """``best.yaml`` of the best COMPLETE trial; that trial (``None`` before there is one)."""
    if not any(t.state == TrialState.COMPLETE for t in study.get_trials(deepcopy=False)):
        return None
    best, attrs = study.best_trial, study.user_attrs
    finished = sum(t.state == TrialState.COMPLETE for t in study.get_trials(deepcopy=False))
    refit = ["graphormer-sepnorm", "fit", *(arg for c in attrs.get("configs", [])
                                            for arg in ("--config", c)),
             "--config", str(path), *attrs.get("overrides", [])]
    head = [f"# Study {study.study_name}: trial {best.number}, "
            f"{best.user_attrs.get('metric', 'objective')} {best.value:.6g}, the best of "
            f"{finished} finished trial(s). Stacks on the recipe; refit with:",
            f"#   {shlex.join(refit)}"]
    body = yaml.safe_dump(stacked(best.params, attrs.get("keys", {})), sort_keys=False)
    _atomic(path, "\n".join(head) + "\n" + body)
    return best


def write_importances(study: optuna.Study, path: Path) -> dict[str, float] | None:
    """``importances.csv``: ``param,importance``, most important first.

    Written once two trials have finished and a parameter varies between them.

    Returns:
        The importances, or ``None`` when not written.
    """
    done = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    if len(done) < 2 or not any(len({str(t.params.get(k)) for t in done}) > 1
                                for k in done[0].params):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna's experimental-API warnings
        importances = optuna.importance.get_param_importances(study)
    _atomic(path, "param,importance\n" + "".join(f"{k},{v:.6f}\n"
                                                  for k, v in importances.items()))
    return importances


def write_reports(study: optuna.Study, folder: Path) -> None:
    """``trials.csv``, ``best.yaml`` and ``importances.csv`` in the study's folder."""
    write_trials(study, folder / "trials.csv")
    write_best(study, folder / "best.yaml")
    write_importances(study, folder / "importances.csv")
