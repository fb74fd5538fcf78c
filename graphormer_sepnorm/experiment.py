"""``graphormer-sepnorm-experiment``: a grid of datasets x {SepNorm, ShareNorm} x seeds.

Each run is a ``graphormer-sepnorm fit`` and a ``test`` of its best checkpoint (by the validation
metric), together in a process of their own (fresh state; a crash stays one run's). One row per
run goes to ``results/<name>.csv`` as soon as the run ends, and ``results/<name>.md`` is
rewritten from the whole CSV: mean ± std per dataset and norm, with the hardware, the budget,
the commit and the date. Runs already in the CSV are skipped, so a killed grid continues where
it stopped (an unfinished run starts over). Run folders go to ``runs/experiments/<name>/``.

With ``--packed`` the seeds of a dataset and norm train together in one fit (packed replicas,
``--model.seeds``; the engine's ``configs/presets/gpu_fast.yaml`` goes in ``--preset``). Each
replica still gets its own row: its best checkpoint (by its own validation metric), tested
alone; ``fit_seconds`` is then the packed fit's, shared by its replicas, and ``accelerator``
says ``packed xR``.

Example:
    ``graphormer-sepnorm-experiment --name cpu_grid --configs configs/zinc_subset.yaml
    configs/molhiv.yaml --preset configs/presets/cpu_10min.yaml --seeds 0 1 2
    --accelerator cpu``
"""

from __future__ import annotations

import argparse
import csv
import datetime
import fcntl
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

FIELDS = ["dataset", "norm", "seed", "monitor", "best_val", "test_metric", "test_value",
          "steps", "fit_seconds", "peak_rss_mb", "accelerator", "checkpoint"]
NORMS = {"sepnorm": "true", "sharenorm": "false"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; see the module docstring."""
    p = argparse.ArgumentParser(prog="graphormer-sepnorm-experiment", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--name", required=True, help="results/<name>.csv and .md")
    p.add_argument("--configs", nargs="+", required=True, help="one dataset config each")
    p.add_argument("--preset", nargs="*", default=[], help="configs stacked on each dataset's")
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--norms", nargs="+", choices=sorted(NORMS), default=["sepnorm", "sharenorm"])
    p.add_argument("--accelerator", default="auto", help="cpu, gpu, auto")
    p.add_argument("--devices", default="1", help="per run, e.g. 1 or 2 (DDP)")
    p.add_argument("--max-steps", type=int, help="steps per run; the schedule ends there too")
    p.add_argument("--max-epochs", type=int, help="epochs per run (schedule from the trainer)")
    p.add_argument("--max-time", help="wall-clock stop per run, DD:HH:MM:SS")
    p.add_argument("--packed", action="store_true",
                   help="train the seeds of each dataset and norm together in one fit")
    p.add_argument("--results-dir", type=Path, default=Path("results"))
    p.add_argument("--runs-dir", type=Path, default=Path("runs/experiments"))
    p.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                   help="further graphormer-sepnorm arguments for every run (last)")
    return p.parse_args(argv)


def budget_args(args: argparse.Namespace) -> list[str]:
    """Trainer (and schedule) overrides for the budget given on the command line."""
    out: list[str] = []
    if args.max_steps is not None:
        out += ["--trainer.max_steps", str(args.max_steps), "--model.total_steps",
                str(args.max_steps)]
    if args.max_epochs is not None:
        out += ["--trainer.max_epochs", str(args.max_epochs), "--model.total_steps", "null"]
        out += [] if args.max_steps is not None else ["--trainer.max_steps", "-1"]
    if args.max_time is not None:
        out += ["--trainer.max_time", args.max_time]
    return out


def budget_text(args: argparse.Namespace) -> str:
    """The budget in words, for the Markdown."""
    parts = [f"preset {', '.join(args.preset)}" if args.preset else "the configs' schedules"]
    for flag in ("max_steps", "max_epochs", "max_time"):
        if getattr(args, flag) is not None:
            parts.append(f"{flag}={getattr(args, flag)}")
    return "; ".join(parts)


def cli_args(args: argparse.Namespace, config: str, norm: str, seed: int,
             run_dir: Path) -> list[str]:
    """The ``graphormer-sepnorm`` arguments shared by a run's fit and test."""
    out = ["--config", config]
    for preset in args.preset:
        out += ["--config", preset]
    out += ["--seed_everything", str(seed), "--data.init_args.seed", str(seed),
            "--model.config.sepnorm", NORMS[norm], "--trainer.accelerator", args.accelerator,
            "--trainer.devices", str(args.devices), "--trainer.enable_progress_bar", "false",
            "--trainer.logger.class_path", "lightning.pytorch.loggers.CSVLogger",
            "--trainer.logger.init_args.save_dir", str(run_dir.parent),
            "--trainer.logger.init_args.name", run_dir.name]
    return out + budget_args(args)


def worker(spec_path: Path) -> None:
    """One run, in its own process: fit, then test the best checkpoint; writes ``result.json``.

    Under DDP, Lightning starts the other processes by re-running this command; they join the
    fit and the test, and process 0 writes the result.
    """
    from graphormer_sepnorm.cli import main as cli_main

    spec = json.loads(spec_path.read_text())
    if spec.get("seeds"):
        return packed_worker(spec_path, spec)
    start = time.perf_counter()
    # the test runs below, in its own logger version (and outside the timed fit)
    fit = cli_main(["fit", *spec["cli"], "--trainer.logger.init_args.version", "fit",
                    "--test_best", "false"])
    seconds = time.perf_counter() - start
    best = fit.trainer.checkpoint_callback
    if best is None or not best.best_model_path:
        raise RuntimeError("no best checkpoint: did validation run within the budget?")
    test = cli_main(["test", *spec["cli"], "--trainer.logger.init_args.version", "test",
                     "--ckpt_path", best.best_model_path])
    name = "test/" + str(best.monitor).split("/", 1)[-1]
    result = {"monitor": best.monitor, "best_val": float(best.best_model_score),
              "checkpoint": best.best_model_path, "steps": fit.trainer.global_step,
              "test_metric": name, "test_value": float(test.trainer.callback_metrics[name]),
              "fit_seconds": round(seconds, 1)}
    if fit.trainer.global_rank == 0:
        (spec_path.parent / "result.json").write_text(json.dumps(result))


def packed_worker(spec_path: Path, spec: dict[str, Any]) -> None:
    """One packed fit of ``spec['seeds']``, then a test of each replica's best checkpoint."""
    from graphormer_sepnorm.cli import main as cli_main
    from graphormer_sepnorm.training import checkpoint_format

    start = time.perf_counter()
    fit = cli_main(["fit", *spec["cli"], "--model.seeds", json.dumps(spec["seeds"]),
                    "--trainer.logger.init_args.version", "fit", "--test_best", "false"])
    seconds = time.perf_counter() - start
    results = []
    for seed in spec["seeds"]:
        path = Path(fit.trainer.log_dir) / "replicas" / f"seed{seed}.ckpt"
        if not path.is_file():
            raise RuntimeError(f"no best checkpoint of seed {seed}: did validation run?")
        replica = checkpoint_format.load(path)["replica"]
        metric = fit.model.task.metric_name
        test = cli_main(["test", *spec["cli"], "--trainer.logger.init_args.version",
                         f"test-seed{seed}", "--ckpt_path", str(path)])
        results.append({"seed": seed, "monitor": f"val/{metric}",
                        "best_val": replica[f"val_{metric}"], "checkpoint": str(path),
                        "steps": fit.trainer.global_step, "test_metric": f"test/{metric}",
                        "test_value": float(test.trainer.callback_metrics[f"test/{metric}"]),
                        "fit_seconds": round(seconds, 1)})
    if fit.trainer.global_rank == 0:
        (spec_path.parent / "result.json").write_text(json.dumps(results))


def spawn(spec_path: Path, log: Path) -> float | None:
    """Runs :func:`worker` in a subprocess; returns its peak RSS in MB where measurable.

    Raises:
        RuntimeError: the run failed (its output is in ``log``).
    """
    cmd = [sys.executable, "-m", "graphormer_sepnorm.experiment", "--run-spec", str(spec_path)]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        rss = None
        if hasattr(os, "wait4"):  # the child's peak RSS (KiB on Linux), its own children's too
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode, rss = os.waitstatus_to_exitcode(status), usage.ru_maxrss / 1024
        else:
            proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"run failed (exit {proc.returncode}); see {log}")
    return rss


def run_one(args: argparse.Namespace, config: str, norm: str, seed: int) -> dict[str, Any]:
    """Runs one fit + test in a subprocess and returns its CSV row."""
    dataset = Path(config).stem
    run_dir = args.runs_dir / args.name / f"{dataset}-{norm}-seed{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)  # an unfinished earlier attempt
    run_dir.mkdir(parents=True)
    spec = run_dir / "spec.json"
    spec.write_text(json.dumps({"cli": [*cli_args(args, config, norm, seed, run_dir),
                                        *args.extra]}))
    rss = spawn(spec, run_dir / "run.log")
    result = json.loads((run_dir / "result.json").read_text())
    return {"dataset": dataset, "norm": norm, "seed": seed, **result,
            "peak_rss_mb": "" if rss is None else round(rss), "accelerator": args.accelerator}


def run_packed(args: argparse.Namespace, config: str, norm: str,
               seeds: list[int]) -> list[dict[str, Any]]:
    """Runs one packed fit of ``seeds`` and the replicas' tests; returns their CSV rows."""
    dataset = Path(config).stem
    run_dir = args.runs_dir / args.name / f"{dataset}-{norm}-seeds{'-'.join(map(str, seeds))}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    spec = run_dir / "spec.json"
    spec.write_text(json.dumps({"seeds": seeds, "cli": [
        *cli_args(args, config, norm, seeds[0], run_dir), *args.extra]}))
    rss = spawn(spec, run_dir / "run.log")
    results = json.loads((run_dir / "result.json").read_text())
    return [{"dataset": dataset, "norm": norm, **result,
             "peak_rss_mb": "" if rss is None else round(rss),
             "accelerator": f"{args.accelerator}, packed x{len(seeds)}"} for result in results]


def read_rows(path: Path) -> list[dict[str, str]]:
    """The CSV's rows (none if it does not exist)."""
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def append_row(path: Path, row: dict[str, Any], fields: list[str] = FIELDS) -> None:
    """Appends one run (its ``fields``; absent ones empty), the header first in a new file.

    Under a lock: two processes (a grid's, a campaign's) may append to one file.
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


def mean_std(values: list[float], digits: int = 4) -> str:
    """``mean ± std`` (sample std); a single value alone."""
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
        seeds = ",".join(r["seed"] for r in group)
        test = mean_std([float(r["test_value"]) for r in group])
        val = mean_std([float(r["best_val"]) for r in group])
        steps = mean_std([float(r["steps"]) for r in group], 0)
        minutes = mean_std([float(r["fit_seconds"]) / 60 for r in group], 1)
        lines.append(f"| {dataset} | {norm} | {seeds} | {group[0]['test_metric']} | {test} "
                     f"| {val} | {steps} | {minutes} |")
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


def commit() -> str:
    """``git rev-parse HEAD``, with ``-dirty`` when the working tree has changes."""
    def git(*cmd: str) -> str:
        return subprocess.run(["git", *cmd], capture_output=True, text=True,
                              check=False).stdout.strip()
    head = git("rev-parse", "HEAD") or "unknown"
    return head + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def write_markdown(path: Path, rows: list[dict[str, str]], args: argparse.Namespace) -> None:
    """Rewrites ``results/<name>.md`` from every row of the CSV."""
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = [f"# {args.name}: SepNorm vs ShareNorm", "",
            "Mean ± sample std over seeds; test metric of the checkpoint with the best "
            "validation metric.", "", summary_table(rows), "",
            f"- Hardware: {hardware()}; accelerator {args.accelerator}, devices {args.devices}",
            f"- Budget: {budget_text(args)}", f"- Commit: {commit()}", f"- Date: {date}",
            f"- Command: `graphormer-sepnorm-experiment {' '.join(args.argv)}`", ""]
    path.write_text("\n".join(text))


def run_packed_grid(args: argparse.Namespace, csv_path: Path,
                    done: set[tuple[str, str, str]]) -> int:
    """Packed fits, one per dataset and norm, of the seeds not in the CSV yet; the failures."""
    failed = 0
    for config in args.configs:
        for norm in args.norms:
            seeds = [s for s in args.seeds if (Path(config).stem, norm, str(s)) not in done]
            if not seeds:
                continue
            try:
                for row in run_packed(args, config, norm, seeds):
                    append_row(csv_path, row)
            except RuntimeError as err:
                failed += 1
                print(f"run failed: {err}", file=sys.stderr)
            write_markdown(args.results_dir / f"{args.name}.md", read_rows(csv_path), args)
    return failed


def main(argv: list[str] | None = None) -> int:
    """Runs the grid; returns the number of failed runs (the exit status)."""
    args = parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    csv_path = args.results_dir / f"{args.name}.csv"
    done = {(r["dataset"], r["norm"], r["seed"]) for r in read_rows(csv_path)}
    failed = 0
    if args.packed:
        failed = run_packed_grid(args, csv_path, done)
    # Seeds outermost: a grid stopped early still holds every dataset and norm for its seeds.
    for seed in [] if args.packed else args.seeds:
        for config in args.configs:
            for norm in args.norms:
                if (Path(config).stem, norm, str(seed)) in done:
                    continue
                try:
                    append_row(csv_path, run_one(args, config, norm, seed))
                except RuntimeError as err:
                    failed += 1
                    print(f"run failed: {err}", file=sys.stderr)
                write_markdown(args.results_dir / f"{args.name}.md", read_rows(csv_path), args)
    if csv_path.is_file():  # also when every run was done already: the table shows this command
        write_markdown(args.results_dir / f"{args.name}.md", read_rows(csv_path), args)
    return failed


if __name__ == "__main__":
    if sys.argv[1:2] == ["--run-spec"]:
        worker(Path(sys.argv[2]))
    else:
        sys.exit(main())
