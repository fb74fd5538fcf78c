"""The experiment grid's results: rows read from run folders, the CSV, the Markdown summary.

A finished cell's row is read from what its commands left in its run folder: the fit's
``last.ckpt`` (steps, seconds, and the monitoring ``ModelCheckpoint``'s best score and file),
each packed replica's best checkpoint, and each test's ``metrics.csv`` (Lightning's CSVLogger).
So rows are the same whichever machine or scheduler ran the commands.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import fcntl
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphormer_sepnorm.checkpoints import read_checkpoint
from graphormer_sepnorm.training.resume import find_last_checkpoint, monitor_state

FIELDS = ["dataset", "norm", "seed", "fold", "monitor", "best_val", "test_metric", "test_value",
          "steps", "fit_seconds", "peak_rss_mb", "accelerator", "checkpoint", "metrics",
          "commit", "date"]


@dataclass(frozen=True)
class Cell:
    """One fit of the grid: a dataset config, a norm, its seeds (several when packed), a fold."""

    config: str
    norm: str
    seeds: tuple[int, ...]
    packed: bool = False
    fold: int | None = None

    @property
    def dataset(self) -> str:
        """The config's file name without ``.yaml``."""
        return Path(self.config).stem

    @property
    def name(self) -> str:
        """The run folder's name (``zinc-sepnorm-seed0``; packed ``-seeds0-1``; ``-fold2``)."""
        if self.packed:
            return f"{self.dataset}-{self.norm}-seeds{'-'.join(map(str, self.seeds))}"
        fold = "" if self.fold is None else f"-fold{self.fold}"
        return f"{self.dataset}-{self.norm}-seed{self.seeds[0]}{fold}"

    def keys(self) -> list[tuple[str, str, str, str]]:
        """``(dataset, norm, seed, fold)`` of each of its rows, as the CSV has them."""
        fold = "" if self.fold is None else str(self.fold)
        return [(self.dataset, self.norm, str(s), fold) for s in self.seeds]


def read_rows(path: Path) -> list[dict[str, str]]:
    """The CSV's rows (none if it does not exist)."""
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def append_row(path: Path, row: dict[str, Any], fields: list[str] = FIELDS) -> None:
    """Appends one run (its ``fields``; absent ones empty), the header first in a new file.

    Under a lock: several processes (a SLURM array's tasks) may append to one file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", newline="") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            writer = csv.DictWriter(f, fieldnames=fields)
            if f.tell() == 0:
                writer.writeheader()
            writer.writerow({k: row.get(k, "") for k in fields})
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def test_metrics(folder: Path) -> dict[str, float]:
    """Every ``test/*`` value in ``folder/metrics.csv`` (a test's; the last of each)."""
    out = {}
    for row in read_rows(folder / "metrics.csv"):
        out.update({k: float(v) for k, v in row.items() if k.startswith("test/") and v})
    return out


def cell_rows(folder: Path, cell: Cell) -> list[dict[str, Any]] | None:
    """A finished cell's rows, one per seed, from its run folder; ``None`` while unfinished.

    Args:
        folder: the cell's run folder (``fit/``, and ``test/`` or ``test-seed<s>/``, in it).
        cell: the cell.
    """
    last = find_last_checkpoint(folder)
    if last is None:
        return None
    ckpt = read_checkpoint(last, mmap=True)
    best = monitor_state(ckpt) or {}
    metric = str(best.get("monitor", "val/loss")).split("/", 1)[-1]
    now, head = utc_now(), commit()
    rows = []
    for seed in cell.seeds:
        metrics = test_metrics(folder / (f"test-seed{seed}" if cell.packed else "test"))
        if f"test/{metric}" not in metrics:
            return None
        row = {"dataset": cell.dataset, "norm": cell.norm, "seed": seed,
               "fold": "" if cell.fold is None else cell.fold, "monitor": f"val/{metric}",
               "test_metric": f"test/{metric}", "test_value": metrics[f"test/{metric}"],
               "steps": ckpt["global_step"], "fit_seconds": round(ckpt.get("fit_seconds", 0), 1),
               "metrics": json.dumps(metrics, sort_keys=True), "commit": head, "date": now}
        if cell.packed:
            path = folder / "fit" / "replicas" / f"seed{seed}.ckpt"
            replica = read_checkpoint(path, mmap=True)
            row.update(best_val=replica["replica"][f"val_{metric}"], checkpoint=str(path))
        else:
            row.update(best_val=float(best["best_model_score"]),
                       checkpoint=best["best_model_path"])
        rows.append(row)
    return rows


def mean_std(values: list[float], digits: int = 4) -> str:
    """``mean ± std`` (sample std); a single value alone; ``-`` for none."""
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def summary_table(rows: list[dict[str, str]]) -> str:
    """The Markdown table: one line per dataset and norm, in the CSV's order."""
    groups: dict[tuple[str, str], list[dict[str, str]]] = {}
    for row in rows:
        groups.setdefault((row["dataset"], row["norm"]), []).append(row)
    lines = ["| Dataset | Norm | Seeds | Test metric | Test | Best val | Steps | Fit min |",
             "|---|---|---|---|---|---|---|---|"]
    for (dataset, norm), group in groups.items():
        seeds = ",".join(r["seed"] + (f" f{r['fold']}" if r.get("fold") else "") for r in group)
        test = mean_std([float(r["test_value"]) for r in group])
        val = mean_std([float(r["best_val"]) for r in group])
        steps = mean_std([float(r["steps"]) for r in group], 0)
        minutes = mean_std([float(r["fit_seconds"]) / 60 for r in group], 1)
        lines.append(f"| {dataset} | {norm} | {seeds} | {group[0]['test_metric']} | {test} "
                     f"| {val} | {steps} | {minutes} |")
    return "\n".join(lines)


def metric_table(rows: list[dict[str, str]]) -> str:
    """Every test metric (per task, too) by dataset and norm: mean ± std over the rows."""
    groups: dict[str, list[dict[str, float]]] = {}
    for row in rows:
        if row.get("metrics"):
            groups.setdefault(f"{row['dataset']} {row['norm']}", []).append(
                json.loads(row["metrics"]))
    if not groups:
        return ""
    names = sorted({k for group in groups.values() for m in group for k in m})
    lines = ["| Metric | " + " | ".join(groups) + " |", "|---" * (len(groups) + 1) + "|"]
    for name in names:
        cells = [mean_std([m[name] for m in group if name in m and not math.isnan(m[name])])
                 for group in groups.values()]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def hardware() -> str:
    """CPU model and cores, and the GPUs ``nvidia-smi`` lists (if any)."""
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [ln.split(":", 1)[1].strip() for ln in cpuinfo.read_text().splitlines()
                 if ln.startswith("model name")]
        cpu = names[0] if names else cpu
    gpus = "none"
    if shutil.which("nvidia-smi"):
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, check=False).stdout.split("\n")
        gpus = ", ".join(g.strip() for g in out if g.strip()) or "none"
    return f"CPU: {cpu}, {os.cpu_count()} cores; GPU: {gpus}"


def utc_now() -> str:
    """The time now, ``YYYY-MM-DD HH:MM UTC``."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def commit() -> str:
    """``git rev-parse HEAD``, with ``-dirty`` when the working tree has changes."""
    def git(*cmd: str) -> str:
        return subprocess.run(["git", *cmd], capture_output=True, text=True,
                              check=False).stdout.strip()
    head = git("rev-parse", "HEAD") or "unknown"
    return head + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def budget_text(args: argparse.Namespace) -> str:
    """The budget in words, for the Markdown."""
    parts = [f"preset {', '.join(args.preset)}" if args.preset else "the configs' schedules"]
    for flag in ("max_steps", "max_epochs", "max_time"):
        if getattr(args, flag) is not None:
            parts.append(f"{flag}={getattr(args, flag)}")
    return "; ".join(parts)


def _ensemble(rows: list[dict[str, str]]) -> list[str]:
    """For fold rows: the commands predicting with each seed's fold models as one ensemble."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for row in rows:
        if row.get("fold"):
            key = (row["dataset"], row["norm"], row["seed"])
            groups.setdefault(key, []).append(row["checkpoint"])
    if not groups:
        return [""]
    lines = ["", "Each seed's fold models predict as one ensemble (90% intervals by CV+ on the "
             "out-of-fold residuals):", ""]
    for (dataset, norm, seed), paths in groups.items():
        lines.append(f"    # {dataset}, {norm}, seed {seed}")
        lines.append("    graphormer-sepnorm-predict NEW.csv --checkpoint "
                     + " ".join(sorted(paths)))
    return [*lines, ""]


def grid_argv(argv: list[str]) -> list[str]:
    """The grid's ``argv`` without ``--slurm``, ``--gather`` and ``--sbatch`` with its values."""
    out: list[str] = []
    skipping = False
    for k, arg in enumerate(argv):
        if arg == "--extra":
            return out + argv[k:]
        if arg in ("--slurm", "--gather", "--sbatch"):
            skipping = arg == "--sbatch"
        elif not (skipping and not arg.startswith("--")):
            skipping = False
            out.append(arg)
    return out


def write_markdown(args: argparse.Namespace, rows: list[dict[str, str]]) -> None:
    """Rewrites ``results/<name>.md`` from every row of the CSV."""
    text = [f"# {args.name}: SepNorm vs ShareNorm", "",
            "Mean ± sample std over seeds; test metric of the checkpoint with the best "
            "validation metric. Each row of the CSV has its commit and date.", "",
            summary_table(rows), "", metric_table(rows), *_ensemble(rows),
            f"- Hardware: {hardware()}; accelerator {args.accelerator}, devices {args.devices}",
            f"- Budget: {budget_text(args)}", f"- Commit: {commit()}", f"- Date: {utc_now()}",
            f"- Command: `graphormer-sepnorm-experiment {' '.join(grid_argv(args.argv))}`", ""]
    (args.results_dir / f"{args.name}.md").write_text("\n".join(text))
