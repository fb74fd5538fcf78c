"""Search spaces: YAML files of the CLI's own dotted keys with their ranges.

::

    model.lr: {low: 5.0e-5, high: 1.0e-3, log: true}   # a float, sampled on a log scale
    model.config.dropout: {low: 0.0, high: 0.3}         # a float
    trainer.max_epochs: {low: 30, high: 80, step: 10}   # an int (both bounds are ints)
    data.batch_size: {choices: [32, 64, 128]}           # one of these

A key is any key ``graphormer-sepnorm fit`` takes (``--print_config`` lists them); a trial's
values become that fit's command-line overrides (``--model.lr 0.00031``). ``data.batch_size``
stands for ``data.init_args.batch_size``, as on the command line. Bounds may be written
``1e-5`` (YAML reads that as a string; it is read as a number here). The spaces shipped with
the package (``graphormer_sepnorm/configs/hpo/<name>.yaml``) are found by name: ``--space
smiles_csv``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import optuna
import yaml

__all__ = ["ARCHITECTURE", "Param", "bundled_space", "check_pretrained", "contains", "load_space",
           "overrides", "recipe_values", "resolve", "stacked", "suggest"]

#: Keys whose values the pretrained start fixes (its weights' shapes).
ARCHITECTURE = ("model.config.num_layers", "model.config.hidden_dim", "model.config.ffn_dim",
                "model.config.num_heads", "model.config.head_hidden_dim",
                "model.config.edge_encoding", "model.config.multi_hop_max_dist",
                "model.config.sepnorm", "model.config.max_degree", "model.config.max_distance")


@dataclass(frozen=True)
class Param:
    """One key's range: ``low``-``high`` (``log`` scale, ``step``), or ``choices``."""

    key: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple[Any, ...] | None = None

    def distribution(self) -> optuna.distributions.BaseDistribution:
        """Optuna's distribution of the range."""
        if self.choices is not None:
            return optuna.distributions.CategoricalDistribution(self.choices)
        if isinstance(self.low, int) and isinstance(self.high, int):
            return optuna.distributions.IntDistribution(self.low, self.high, log=self.log,
                                                        step=int(self.step or 1))
        return optuna.distributions.FloatDistribution(float(self.low), float(self.high),
                                                      log=self.log, step=self.step)


def _number(value: Any, where: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{where} must be a number, not {value!r}")
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"{where} must be a number, not {value!r}") from None
    return value


def _param(key: str, spec: Any, source: str) -> Param:
    where = f"{source}: {key}"
    if not isinstance(spec, dict):
        raise ValueError(f"{where} must be {{low: .., high: ..}} or {{choices: [..]}}")
    unknown = set(spec) - {"low", "high", "log", "step", "choices"}
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}; use low, high, log, "
                         "step or choices")
    if "choices" in spec:
        if not isinstance(spec["choices"], list) or not spec["choices"]:
            raise ValueError(f"{where}: choices must be a non-empty list")
        return Param(key, choices=tuple(spec["choices"]))
    if "low" not in spec or "high" not in spec:
        raise ValueError(f"{where} needs low and high (or choices)")
    low, high = _number(spec["low"], f"{where}.low"), _number(spec["high"], f"{where}.high")
    if not low < high:
        raise ValueError(f"{where}: low ({low}) must be below high ({high})")
    step = None if spec.get("step") is None else _number(spec["step"], f"{where}.step")
    param = Param(key, low, high, bool(spec.get("log", False)), step)
    param.distribution()  # Optuna's own checks (log with step, log of a value <= 0)
    return param


def load_space(path: str | Path) -> dict[str, Param]:
    """The space of a YAML file, checked, in the file's order.

    Raises:
        ValueError: naming the file and key of a malformed range.
    """
    text = Path(path).read_text()
    spec = yaml.safe_load(text) or {}
    if not isinstance(spec, dict):
        raise ValueError(f"{path}: a search space is a mapping of keys to ranges")
    try:
        return {key: _param(key, value, str(path)) for key, value in spec.items()}
    except ValueError as e:
        raise ValueError(str(e)) from None


def bundled_space(name: str) -> Path | None:
    """The path of the space shipped as ``configs/hpo/<name>.yaml``, if there is one."""
    path = resources.files("graphormer_sepnorm") / "configs" / "hpo" / f"{name}.yaml"
    return Path(str(path)) if path.is_file() else None


def contains(param: Param, value: Any) -> bool:
    """Whether ``value`` lies in the range (or is one of the choices)."""
    if param.choices is not None:
        return value in param.choices
    return isinstance(value, int | float) and not isinstance(value, bool) \
        and param.low <= value <= param.high


def suggest(trial: optuna.trial.Trial, space: dict[str, Param]) -> dict[str, Any]:
    """The trial's values of every key (a queued trial gets its fixed ones)."""
    return {key: _suggest(trial, p) for key, p in space.items()}


def _suggest(trial: optuna.trial.Trial, p: Param) -> Any:
    if p.choices is not None:
        return trial.suggest_categorical(p.key, list(p.choices))
    if isinstance(p.low, int) and isinstance(p.high, int):
        return trial.suggest_int(p.key, p.low, p.high, step=int(p.step or 1), log=p.log)
    return trial.suggest_float(p.key, float(p.low), float(p.high), step=p.step, log=p.log)


def resolve(config: dict[str, Any], key: str) -> tuple[str, Any]:
    """The full key of ``key`` in a resolved config (``init_args`` inserted), and its value.

    Raises:
        KeyError: the config has no such key.
    """
    node: Any = config
    path: list[str] = []
    for part in key.split("."):
        if isinstance(node, dict) and part in node:
            node, path = node[part], [*path, part]
        elif isinstance(node, dict) and isinstance(node.get("init_args"), dict) \
                and part in node["init_args"]:
            node, path = node["init_args"][part], [*path, "init_args", part]
        else:
            raise KeyError(key)
    return ".".join(path), node


def recipe_values(config: dict[str, Any], space: dict[str, Param]) -> dict[str, Any]:
    """Each key's value in the recipe (its resolved config): what trial 0 runs.

    Raises:
        ValueError: a key the fit does not take, naming it.
    """
    values = {}
    for key in space:
        try:
            values[key] = resolve(config, key)[1]
        except KeyError:
            raise ValueError(f"the search space's key {key!r} is not a key of this fit "
                             "(graphormer-sepnorm fit --config ... --print_config lists "
                             "them)") from None
    return values


def check_pretrained(config: dict[str, Any], space: dict[str, Param]) -> None:
    """Refuses architecture keys when the fit starts from a checkpoint (its shapes are fixed).

    Raises:
        ValueError: naming the keys and the way out (``--model.init_from none``).
    """
    start = config.get("model", {}).get("init_from")
    fixed = [key for key in space if key in ARCHITECTURE]
    if fixed and start not in (None, "none"):
        raise ValueError(f"the fit starts from {start!r} (model.init_from), whose weights fix "
                         f"{', '.join(fixed)}; search them from scratch with "
                         "--model.init_from none, or drop them from the space")


def overrides(params: dict[str, Any]) -> list[str]:
    """``--key value`` of each parameter (values as JSON: ``null``, ``true``, numbers)."""
    return [arg for key, value in params.items()
            for arg in (f"--{key}", value if isinstance(value, str) else json.dumps(value))]


def stacked(params: dict[str, Any], keys: dict[str, str]) -> dict[str, Any]:
    """The parameters as a config that stacks on the recipe (``--config best.yaml``).

    Args:
        params: values by the space's keys.
        keys: each space key's full key (:func:`resolve`), e.g. ``data.init_args.batch_size``.
    """
    out: dict[str, Any] = {}
    for key, value in params.items():
        *parents, last = keys.get(key, key).split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out
