r"""Where a default small-data fit's time goes: featurization, steps, statistics, GP, test.

Runs the fit of ``benchmarks/small_data.py``'s ``ours`` in this process (``graphormer-sepnorm
fit --config configs/smiles_csv.yaml --data.path SET.csv --data.target_columns '[y]'
--data.split column --seed_everything S``, extra fit arguments after ``--``), with timers put
around the package's parts from outside (the package is not changed): functions and methods
wrapped in place before the CLI starts, and a Lightning callback for the loops' phases. Each
phase's CPU time (``time.process_time``: all threads of this process, one with
``OMP_NUM_THREADS=1``) and wall time is exclusive: a phase inside another (the descriptors
inside featurization, the GP's own fit inside gathering its features) counts only for itself.

Phases: ``imports`` (Python, torch, Lightning, the package), ``CLI`` (parsing, building model,
data and trainer), the data (``CSV read and split``, ``featurize: RDKit2D descriptors``,
``featurize: Morgan counts``, ``featurize: parse, OGB graph, rest``, ``shortest paths``),
``pretrained start`` (``init_from``), ``GP: gather features`` and ``GP: fit``, ``sanity
check``, ``train: steps`` (``on_train_batch_start`` to ``_end``: forward, backward, optimizer),
``train: between steps`` (the DataLoader's collation of the next batch, Lightning's loop),
``statistics pass`` (``ReestimateGraphTokenStatistics``), ``validation`` (the loop, collation
included), ``diagnostics`` (``GraphTokenDiagnostics``), ``checkpoint saves``, ``final test``
(the best checkpoint loaded and tested, GP blend included) and ``other`` (all the rest: Lightning,
logging, the summary). Results go to ``--json`` (one entry per set and seed, replaced when rerun);
``--report`` writes the Markdown tables of all entries.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/fit_time.py --set solubility --seed 0
    .venv/bin/python benchmarks/fit_time.py --report results/small_data_fit_time.md
"""

from __future__ import annotations

import resource
import time

_START_CPU = time.process_time()

import argparse  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
from collections import Counter, defaultdict  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import lightning.pytorch as pl  # noqa: E402
from lightning.pytorch import Callback  # noqa: E402

import graphormer_sepnorm.cli as cli  # noqa: E402
from graphormer_sepnorm import diagnostics  # noqa: E402
from graphormer_sepnorm.chem import mol_features  # noqa: E402
from graphormer_sepnorm.datasets import base, smiles_csv  # noqa: E402
from graphormer_sepnorm.ensemble import callback as gp_callback  # noqa: E402
from graphormer_sepnorm.ensemble import fingerprint_gp  # noqa: E402
from graphormer_sepnorm.training import batch_statistics, module, report  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from small_data import ROOT, git_commit, logged  # noqa: E402

JSON = ROOT / "results" / "small_data_fit_time.json"


class Phases:
    """Exclusive CPU and wall seconds per named phase, on a stack (inner phases pause outer)."""

    def __init__(self, root: str) -> None:
        self.cpu: dict[str, float] = defaultdict(float)
        self.wall: dict[str, float] = defaultdict(float)
        self.calls: Counter[str] = Counter()
        self.mismatches = 0
        self.stack = [[root, time.process_time(), time.perf_counter()]]

    def _charge_top(self) -> tuple[float, float]:
        cpu, wall = time.process_time(), time.perf_counter()
        top = self.stack[-1]
        self.cpu[top[0]] += cpu - top[1]
        self.wall[top[0]] += wall - top[2]
        return cpu, wall

    def push(self, name: str) -> None:
        """Starts ``name``, pausing the phase running now."""
        cpu, wall = self._charge_top()
        self.stack.append([name, cpu, wall])
        self.calls[name] += 1

    def pop(self, name: str) -> None:
        """Ends ``name`` (counted as a mismatch, and left alone, if it is not the running one)."""
        if len(self.stack) < 2 or self.stack[-1][0] != name:
            self.mismatches += 1
            return
        cpu, wall = self._charge_top()
        self.stack.pop()
        self.stack[-1][1:] = [cpu, wall]

    def close(self) -> None:
        """Charges the running phase with the time up to now (at the end)."""
        cpu, wall = self._charge_top()
        self.stack[-1][1:] = [cpu, wall]

    def top(self) -> str:
        """The running phase."""
        return self.stack[-1][0]

    def wrap(self, owner: Any, attribute: str, name: str) -> None:
        """Replaces ``owner.attribute`` (a function or method) with a timed version."""
        original = getattr(owner, attribute)

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            self.push(name)
            try:
                return original(*args, **kwargs)
            finally:
                self.pop(name)

        setattr(owner, attribute, timed)


class LoopTimer(Callback):
    """The training and validation loops' phases (see the module docstring)."""

    def __init__(self, phases: Phases) -> None:
        self.phases = phases

    def _end_gap(self) -> None:
        if self.phases.top() == "train: between steps":
            self.phases.pop("train: between steps")

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Opens the gap before the epoch's first step."""
        self.phases.push("train: between steps")

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                             batch: Any, batch_idx: int) -> None:
        """Closes the gap, opens the step."""
        self._end_gap()
        self.phases.push("train: steps")

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        """Closes the step, opens the gap before the next."""
        self.phases.pop("train: steps")
        self.phases.push("train: between steps")

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Closes the gap (if validation did not)."""
        self._end_gap()

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Closes the training gap (the statistics pass has run by now)."""
        self._end_gap()

    def on_validation_epoch_start(self, trainer: pl.Trainer,
                                  pl_module: pl.LightningModule) -> None:
        """Opens the validation (or sanity check) loop."""
        self.phases.push("sanity check" if trainer.sanity_checking else "validation")

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Closes the validation (or sanity check) loop."""
        self.phases.pop("sanity check" if trainer.sanity_checking else "validation")


def instrument(phases: Phases) -> None:
    """Puts the timers around the package's parts (see the module docstring)."""
    phases.wrap(cli.GraphormerCLI, "fit", "other")
    phases.wrap(smiles_csv, "read_table", "CSV read and split")
    phases.wrap(smiles_csv.SmilesCSVDataModule, "_split", "CSV read and split")
    phases.wrap(smiles_csv.SmilesCSVDataModule, "_featurize", "featurize: parse, OGB graph, rest")
    phases.wrap(mol_features.RDKit2D, "__call__", "featurize: RDKit2D descriptors")
    phases.wrap(mol_features.MorganCounts, "__call__", "featurize: Morgan counts")
    phases.wrap(base, "add_shortest_paths", "shortest paths")
    phases.wrap(module, "init_model_from", "pretrained start")
    phases.wrap(gp_callback, "training_features", "GP: gather features")
    phases.wrap(fingerprint_gp.FingerprintGP, "fit", "GP: fit")
    phases.wrap(batch_statistics, "reestimate_graph_token_statistics", "statistics pass")
    for hook in ("on_validation_epoch_start", "on_validation_batch_end",
                 "on_validation_epoch_end"):
        phases.wrap(diagnostics.GraphTokenDiagnostics, hook, "diagnostics")
    phases.wrap(pl.Trainer, "save_checkpoint", "checkpoint saves")
    phases.wrap(cli, "run_test_of_best", "final test")


def fit_arguments(args: argparse.Namespace) -> list[str]:
    """The ``fit`` arguments of ``small_data.py``'s ``ours`` for this set and seed."""
    run_dir = args.runs_dir / args.set / f"seed{args.seed}"
    return ["fit", "--config", str(args.config), "--data.path",
            str(args.data_dir / f"{args.set}.csv"), "--data.target_columns", "[y]",
            "--data.split", "column", "--seed_everything", str(args.seed),
            "--trainer.logger.init_args.save_dir", str(run_dir.parent),
            "--trainer.logger.init_args.name", "",
            "--trainer.logger.init_args.version", run_dir.name, *args.extra]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Runs the fit with the timers; the phases' seconds, calls and the run's conditions."""
    imports_cpu = time.process_time() - _START_CPU
    load = os.getloadavg()[0]
    phases = Phases("CLI")
    instrument(phases)
    started = time.perf_counter()
    arguments = fit_arguments(args)
    cli._cli(arguments, callbacks=[report.FitLog(), LoopTimer(phases)])
    phases.close()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    metrics = args.runs_dir / args.set / f"seed{args.seed}" / "metrics.csv"
    return {
        "set": args.set, "seed": args.seed, "extra": args.extra,
        "commit": git_commit(ROOT), "threads": os.environ.get("OMP_NUM_THREADS", ""),
        "load_start": load, "load_end": os.getloadavg()[0], "machine": platform.machine(),
        "cores": os.cpu_count(),
        "finished": datetime.now(timezone.utc).isoformat(timespec="minutes"),
        "test_mae": logged(metrics, "test/mae")[-1],
        "cpu": {"imports": imports_cpu, **phases.cpu},
        "wall": dict(phases.wall), "wall_total": time.perf_counter() - started,
        "calls": dict(phases.calls), "mismatches": phases.mismatches,
        "process_cpu": usage.ru_utime + usage.ru_stime, "command": arguments}


ORDER = ["imports", "CLI", "CSV read and split", "featurize: RDKit2D descriptors",
         "featurize: Morgan counts", "featurize: parse, OGB graph, rest", "shortest paths",
         "pretrained start", "GP: gather features", "GP: fit", "sanity check", "train: steps",
         "train: between steps", "statistics pass", "validation", "diagnostics",
         "checkpoint saves", "final test", "other"]


GROUPS = {
    "featurization (CSV, RDKit descriptors, Morgan, graphs, shortest paths)":
        ["CSV read and split", "featurize: RDKit2D descriptors", "featurize: Morgan counts",
         "featurize: parse, OGB graph, rest", "shortest paths"],
    "training (steps, and the batches' collation between them)":
        ["train: steps", "train: between steps"],
    "statistics passes": ["statistics pass"],
    "validation (loops, sanity check, diagnostics, checkpoint saves)":
        ["validation", "sanity check", "diagnostics", "checkpoint saves"],
    "GP (features gathered, fit)": ["GP: gather features", "GP: fit"],
    "final test": ["final test"],
    "startup and the rest (imports, CLI, pretrained start, Lightning)":
        ["imports", "CLI", "pretrained start", "other"],
}


def markdown(entries: list[dict[str, Any]]) -> str:
    """One table per entry: each phase's CPU seconds, share, calls and CPU ms per call."""
    out = ["# Where a default small-data fit's time goes", "",
           "Made by `benchmarks/fit_time.py` (its docstring says what each phase holds): the "
           "`ours` fit of `benchmarks/small_data.py` in one process, timers put around the "
           "package's parts from outside. CPU seconds of the process (one thread); wall seconds "
           "beside, inflated by the other processes of the shared 2-core machine.", ""]
    for e in entries:
        total = sum(e["cpu"].values())
        extra = " " + " ".join(e["extra"]) if e["extra"] else ""
        out += [f"## {e['set']}, seed {e['seed']}{extra}",
                "", f"Commit {e['commit']}, OMP_NUM_THREADS={e['threads']}, {e['cores']} cores "
                f"({e['machine']}), load average {e['load_start']:.1f} at the start and "
                f"{e['load_end']:.1f} at the end, {e['finished']}. Test MAE {e['test_mae']:.4f}. "
                f"CPU {total / 60:.2f} min in the phases ({e['process_cpu'] / 60:.2f} min for the "
                f"whole process), wall {e['wall_total'] / 60:.2f} min after imports"
                + (f"; {e['mismatches']} phase mismatches" if e["mismatches"] else "") + ".", "",
                "| part | CPU s | share |", "| --- | --- | --- |",
                *(f"| {group} | {sum(e['cpu'].get(n, 0.0) for n in names):.1f} | "
                  f"{100 * sum(e['cpu'].get(n, 0.0) for n in names) / total:.1f}% |"
                  for group, names in GROUPS.items()),
                "",
                "| phase | CPU s | share | wall s | calls | CPU ms/call |",
                "| --- | --- | --- | --- | --- | --- |"]
        names = [n for n in ORDER if n in e["cpu"]] + sorted(set(e["cpu"]) - set(ORDER))
        for name in names:
            cpu, calls = e["cpu"][name], e["calls"].get(name, 0)
            per = f"{1e3 * cpu / calls:.2f}" if calls else ""
            out.append(f"| {name} | {cpu:.1f} | {100 * cpu / total:.1f}% | "
                       f"{e['wall'].get(name, 0.0):.1f} | {calls or ''} | {per} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--set", help="a set of benchmarks/small_data.py (data-dir/SET.csv)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data" / "public")
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "smiles_csv.yaml")
    parser.add_argument("--runs-dir", type=Path, default=ROOT / "runs" / "fit_time")
    parser.add_argument("--json", type=Path, default=JSON)
    parser.add_argument("--report", type=Path, default=None, help="write the Markdown here")
    args = parser.parse_args(argv)
    args.extra = extra
    entries = json.loads(args.json.read_text()) if args.json.is_file() else []
    if args.set:
        entry = measure(args)
        key = (entry["set"], entry["seed"], entry["extra"])
        entries = [e for e in entries if (e["set"], e["seed"], e["extra"]) != key] + [entry]
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(entries, indent=1) + "\n")
    text = markdown(entries)
    print(text)
    if args.report is not None:
        args.report.write_text(text)


if __name__ == "__main__":
    main()
