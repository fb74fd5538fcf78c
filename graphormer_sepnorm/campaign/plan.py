"""A campaign plan (``campaigns/*.yaml``): which fits, in which order, with which recipe.

A plan lists runs; each names a dataset, its config (the recipe), presets stacked on it, the
norms, the seeds and whether the seeds train packed (one fit of all seeds) or one by one.
Keys given under ``defaults`` apply to every run that does not set them::

    name: paper_table
    defaults: {presets: [configs/presets/gpu_fast.yaml], packed: true}
    runs:
      - {dataset: molhiv, config: configs/molhiv.yaml, seeds: [0, 1, 2, 3]}
      - {dataset: zinc, config: configs/zinc.yaml, seeds: [0]}

A run expands into :class:`Job` s in order: for each norm, one packed job of all seeds (one
seed too: a fit of one packed replica, whose compiled step, optimizer included, is one graph);
or, unpacked, for each seed (outermost, so a campaign cut short holds both norms of its first
seeds) each norm. Paths are relative to the directory the campaign runs in (the repository).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = ["NORMS", "Job", "Plan", "load_plan"]

#: ``--model.config.sepnorm`` of each norm.
NORMS = {"sepnorm": "true", "sharenorm": "false"}
RUN_KEYS = {"dataset", "config", "presets", "norms", "seeds", "packed", "args"}
DEFAULTS = {"presets": [], "norms": ["sepnorm", "sharenorm"], "seeds": [0], "packed": False,
            "args": []}


@dataclass(frozen=True)
class Job:
    """One fit of a plan: a dataset, a norm and its seeds (several: packed replicas).

    Attributes:
        dataset: the dataset's name (also the folder of its prepared splits).
        norm: ``'sepnorm'`` or ``'sharenorm'``.
        seeds: the seeds of this fit; several train together as packed replicas.
        configs: the dataset config, then the presets stacked on it.
        args: further ``graphormer-sepnorm`` arguments (last, so they win).
        run_first_seed: the first seed of the plan's run this job belongs to (whose best
            model a plan with ``keep_best: first`` keeps).
        pack: fit the seeds as packed replicas even when there is one (several always are).
    """

    dataset: str
    norm: str
    seeds: tuple[int, ...]
    configs: tuple[str, ...]
    args: tuple[str, ...] = ()
    run_first_seed: int = 0
    pack: bool = False

    @property
    def packed(self) -> bool:
        """Whether the seeds train as packed replicas (``--model.seeds``)."""
        return self.pack or len(self.seeds) > 1

    @property
    def name(self) -> str:
        """``molhiv-sepnorm-seeds0-1-2-3`` or ``zinc-sharenorm-seed0``: its state folder."""
        if self.packed:
            return f"{self.dataset}-{self.norm}-seeds{'-'.join(map(str, self.seeds))}"
        return f"{self.dataset}-{self.norm}-seed{self.seeds[0]}"

    def recipe(self, seed: int | None = None) -> list[str]:
        """The ``graphormer-sepnorm`` arguments of this fit.

        Args:
            seed: one seed of a packed job, as a single model (its replica's test); ``None``:
                the job itself.
        """
        out = [arg for config in self.configs for arg in ("--config", config)]
        seeds = list(self.seeds) if seed is None else [seed]
        out += ["--seed_everything", str(seeds[0]), "--data.init_args.seed", str(seeds[0]),
                "--model.config.sepnorm", NORMS[self.norm]]
        if seed is None and self.packed:
            out += ["--model.seeds", "[" + ", ".join(map(str, seeds)) + "]"]
        return out + list(self.args)


@dataclass(frozen=True)
class Plan:
    """A plan file's jobs, in the order they run.

    Attributes:
        name: the plan's name (``name:``, else the file's stem).
        jobs: every fit, in order.
        keep_best: which best models of finished jobs stay in the state: ``'first'`` (each
            run's first seed's only: the state stays small enough to travel), ``'all'``.
        moments: dtype of AdamW's moments in the saved state: ``'float32'`` (resumes exactly)
            or ``'bfloat16'`` (a third smaller; see :mod:`~graphormer_sepnorm.campaign.state`).
    """

    name: str
    jobs: tuple[Job, ...]
    keep_best: str = "first"
    moments: str = "float32"


def _expand(run: dict[str, Any]) -> list[Job]:
    configs = (str(run["config"]), *map(str, run["presets"]))
    args = tuple(map(str, run["args"]))
    seeds = [int(s) for s in run["seeds"]]
    if run["packed"]:
        return [Job(run["dataset"], norm, tuple(seeds), configs, args, seeds[0], pack=True)
                for norm in run["norms"]]
    return [Job(run["dataset"], norm, (seed,), configs, args, seeds[0])
            for seed in seeds for norm in run["norms"]]


def _check_run(run: dict[str, Any], where: str) -> None:
    unknown = set(run) - RUN_KEYS
    missing = {"dataset", "config"} - set(run)
    if unknown or missing:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}, missing {sorted(missing)}; "
                         f"a run has {sorted(RUN_KEYS)}")
    bad = [n for n in run["norms"] if n not in NORMS]
    if bad or not run["seeds"] or len(set(run["seeds"])) != len(run["seeds"]):
        raise ValueError(f"{where}: norms must be among {sorted(NORMS)} (got {bad}) and seeds "
                         f"distinct and not empty (got {run['seeds']})")


def plan_from_dict(data: dict[str, Any], default_name: str) -> Plan:
    """A :class:`Plan` from a plan file's contents (see the module docstring).

    Raises:
        ValueError: unknown or missing keys, unknown norms, repeated job names.
    """
    extra = set(data) - {"name", "defaults", "runs", "keep_best", "moments"}
    if extra or not data.get("runs"):
        raise ValueError(f"a plan has name, defaults, runs, keep_best, moments (got extra "
                         f"{sorted(extra)}) and at least one run")
    defaults = {**DEFAULTS, **(data.get("defaults") or {})}
    jobs: list[Job] = []
    for index, run in enumerate(data["runs"]):
        run = {**defaults, **run}
        _check_run(run, f"run {index}")
        jobs += _expand(run)
    names = [job.name for job in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"jobs repeat: {sorted({n for n in names if names.count(n) > 1})}")
    keep, moments = data.get("keep_best", "first"), data.get("moments", "float32")
    if keep not in ("first", "all") or moments not in ("float32", "bfloat16"):
        raise ValueError("keep_best is 'first' or 'all'; moments is 'float32' or 'bfloat16'")
    return Plan(str(data.get("name", default_name)), tuple(jobs), keep, moments)


def load_plan(path: str | Path) -> Plan:
    """Reads a plan file (YAML)."""
    path = Path(path)
    return plan_from_dict(yaml.safe_load(path.read_text()) or {}, path.stem)


def select(jobs: Sequence[Job], patterns: Sequence[str]) -> list[Job]:
    """The jobs whose name matches one of the shell patterns (all without patterns)."""
    from fnmatch import fnmatch

    return [j for j in jobs if not patterns or any(fnmatch(j.name, p) for p in patterns)]
