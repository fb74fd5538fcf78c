"""``python -m graphormer_sepnorm.campaign PLAN STATE_DIR --budget-s 540``: one resumable command.

Works through a plan's jobs in order within a wall-clock budget. Each job fits until it ends
or the budget would run out, saving a resume point at a safe step (see
:mod:`~graphormer_sepnorm.campaign.budget`); a finished fit's seeds are each tested with their
best-on-validation model and appended to ``STATE_DIR/results.csv``. Run again with the same
state folder (on any machine), it continues where it stopped and skips what is done.

Exit status: 0 when every job of the plan is done, 3 when work is left (the budget ran out),
1 when a job failed (its error is printed and kept in its ``status.json``; a job that failed
twice with the same code is skipped until the code changes; ``--stop-on-failure`` starts no
job after it). A job's chunk starts only with enough seconds left to reach its first step
(its last chunk's startup with this code, or ``--min-start-s``).

What the command compiled is carried to the next in ``STATE/compile-cache``
(:mod:`~graphormer_sepnorm.campaign.compile_cache`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from graphormer_sepnorm.campaign.compile_cache import load_compile_cache, save_compile_cache
from graphormer_sepnorm.campaign.jobs import Options, fit_chunk, scratch_folder, test_seeds
from graphormer_sepnorm.campaign.plan import Job, Plan, load_plan, select
from graphormer_sepnorm.campaign.state import FIELDS, JobState, atomic_write_text, remove_tree
from graphormer_sepnorm.experiment import append_row, read_rows, summary_table

__all__ = ["main"]
MAX_FAILURES = 2
#: Seconds for the tests' setup (data, model), and for a seed's test with no validation timed.
TEST_GUESS_S = 20.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; see the module docstring."""
    p = argparse.ArgumentParser(prog="python -m graphormer_sepnorm.campaign",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("plan", type=Path, help="campaigns/<plan>.yaml")
    p.add_argument("state", type=Path, help="the state folder (made if missing)")
    p.add_argument("--budget-s", type=float, required=True,
                   help="wall-clock seconds this command may take, all included")
    p.add_argument("--budget-steps", type=int,
                   help="also stop after this many training steps (rehearsals)")
    p.add_argument("--min-start-s", type=float, default=90.0,
                   help="do not start a job's chunk with fewer seconds left (default 90; more "
                        "where its last chunk took longer to reach its first step)")
    p.add_argument("--save-every-s", type=float, default=180.0,
                   help="also save a fit's resume point this often while it trains, so that a "
                        "command killed past its budget loses at most that (default 180)")
    p.add_argument("--profile-steps", type=int, default=0,
                   help="profile this many steps of each job's fit, once per job and code, "
                        "into its state folder's profile-<commit>.txt (default 0: none)")
    p.add_argument("--profile-after", type=int, default=50,
                   help="steps into a fit before profiling (default 50: past compiling)")
    p.add_argument("--prepared", type=Path,
                   help="prepared splits: DIR/<dataset> (else the configs' datamodules)")
    p.add_argument("--data-root", default="data", help="the datamodules' root (default data)")
    p.add_argument("--accelerator", default="auto", help="cpu, gpu or auto (default)")
    p.add_argument("--only", nargs="*", default=[], help="job name patterns (default: all)")
    p.add_argument("--commit", help="the code's commit for the results (default: git's)")
    p.add_argument("--smoke-verdict", type=Path,
                   help="a file in which a smoke check running beside the campaign writes "
                        "'passed' or 'failed': each result row's commit then gets "
                        "'+smoke-failed', or '+smoke-pending' while the file is missing")
    p.add_argument("--compile-cache-mib", type=float, default=12.0,
                   help="carry what this command compiled to the next in STATE/compile-cache, "
                        "up to this many MiB compressed (default 12; 0: none saved); a cache "
                        "found there is loaded first")
    p.add_argument("--stop-on-failure", action="store_true",
                   help="start no job after one failed (a lease's first try, which run.sh "
                        "then repeats with the math attention)")
    return p.parse_args(argv)


def commit_of_code(given: str | None) -> str:
    """``given``, else ``git rev-parse --short HEAD`` (``-dirty`` with changes), else unknown."""
    if given:
        return given
    def git(*cmd: str) -> str:
        return subprocess.run(["git", *cmd], capture_output=True, text=True,
                              check=False).stdout.strip()
    head = git("rev-parse", "--short", "HEAD")
    if not head:
        return "unknown"
    return head + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def device_name(accelerator: str) -> str:
    """The GPU's name when this command trains on one, else the CPU's model."""
    if accelerator != "cpu" and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path(
            "/proc/cpuinfo").is_file() else []:
        if line.startswith("model name"):
            return "cpu: " + line.split(":", 1)[1].strip()
    return "cpu"


def write_summary(state_dir: Path, plan: Plan) -> None:
    """``results.md``: mean ± std per dataset and norm, and the jobs still to do."""
    rows = read_rows(state_dir / "results.csv")
    done = {r["job"] for r in rows}
    left = [j.name for j in plan.jobs if j.name not in done]
    text = [f"# {plan.name}", "", "Test metric of each seed's best-on-validation model; mean "
            "± sample std over seeds.", "", summary_table(rows) if rows else "(no run yet)",
            "", f"Jobs left: {', '.join(left) if left else 'none'}", ""]
    atomic_write_text("\n".join(text), state_dir / "results.md")


def row_commit(commit: str, verdict: Path | None) -> str:
    """``commit`` as a result row records it, marked with the smoke check's verdict so far."""
    if verdict is None:
        return commit
    said = verdict.read_text().strip() if verdict.is_file() else "pending"
    return commit if said == "passed" else f"{commit}+smoke-{said}"


def run_job(job: Job, state: JobState, options: Options, deadline: float,
            steps_left: int | None, meta: dict[str, Any]) -> tuple[bool, int]:
    """Advances one job: a fit chunk, then (if the fit finished) its tests. Done, steps."""
    steps = 0
    if state.phase == "fit":
        finished, steps = fit_chunk(job, state, options, deadline, steps_left)
        print(f"{job.name}: chunk {state.status['chunks']} ended at step "
              f"{state.status['steps']} ({steps} steps, {'finished' if finished else 'paused'})"
              f"; best {state.status['best']}", flush=True)
        if not finished:
            return False, steps
    # the tests must end in time too (a command killed at its limit returns nothing): else
    # they wait for the next command. A seed's test costs about a validation, plus the setup.
    per_seed = state.status.get("val_seconds") or TEST_GUESS_S
    if deadline - time.monotonic() < per_seed * len(job.seeds) + TEST_GUESS_S:
        print(f"{job.name}: fit done; its tests wait for the next command", flush=True)
        return False, steps
    commit = row_commit(meta["commit"], meta["smoke_verdict"])
    for row in test_seeds(job, state, options):
        row = {**row, "device": meta["device"], "commit": commit}
        append_row(state.folder.parent.parent / "results.csv", row, FIELDS)
        print(f"{job.name}: seed {row['seed']} {row['test_metric']} {row['test_value']:.4f} "
              f"(best {row['monitor']} {row['best_val']:.4f} at step {row['best_step']})",
              flush=True)
    keep = list(job.seeds) if meta["keep_best"] == "all" else [job.run_first_seed]
    state.finish(list(job.seeds), keep)
    return True, steps


def start_seconds(state: JobState, least: float, code: str) -> float:
    """Seconds a chunk of this job needs left to start.

    ``least``, or more where its last chunk with this ``code`` took longer to reach its first
    step (a cold compile: data, model and graphs). Another code's startup says nothing: the
    third lease's 269 s came from compiling each padded length, which the next code does once.
    """
    chunks = [c for c in state.status.get("chunk_log") or [] if c.get("code") == code]
    startup = (chunks[-1].get("startup_s") or 0.0) if chunks else 0.0
    return max(least, 1.2 * startup)


def gave_up(state: JobState, commit: str) -> bool:
    """Whether the job failed :data:`MAX_FAILURES` times with this code (new code retries)."""
    return (state.status["failures"] >= MAX_FAILURES
            and state.status.get("failed_commit", commit) == commit)


def record_failure(state: JobState, commit: str) -> None:
    """Counts a failure of this code (a new commit starts the count over) and keeps its error."""
    traceback.print_exc()
    if state.status.get("failed_commit") != commit:
        state.status["failures"] = 0
    state.status["failures"] += 1
    state.status["failed_commit"] = commit
    state.status["error"] = traceback.format_exc(limit=3)
    state.save_status()


def main(argv: list[str] | None = None) -> int:
    """Runs the plan within the budget; the exit status (see the module docstring)."""
    args = parse_args(argv)
    started = time.monotonic()
    deadline = started + args.budget_s
    plan = load_plan(args.plan)
    commit = commit_of_code(args.commit)
    code = commit.split("+")[0]  # "+smoke-failed" marks rows, not another code
    options = Options(args.prepared, args.data_root, args.accelerator, scratch_folder(),
                      getattr(torch, plan.moments), args.save_every_s,
                      (args.profile_after, args.profile_steps), code)
    meta = {"device": device_name(args.accelerator), "commit": commit,
            "keep_best": plan.keep_best, "smoke_verdict": args.smoke_verdict}
    steps_left, failed, spent, left = args.budget_steps, False, False, []
    print(load_compile_cache(args.state), flush=True)
    try:
        for job in select(plan.jobs, args.only):
            state = JobState(args.state / "jobs" / job.name, job.recipe())
            if state.phase == "done" or gave_up(state, code):
                continue
            need = start_seconds(state, args.min_start_s, code)
            spent = spent or deadline - time.monotonic() < need or steps_left == 0
            if spent:  # the jobs keep their order: none starts after one paused
                left.append(job.name)
                continue
            print(f"[campaign +{time.monotonic() - started:.0f}s] {job.name}: {state.phase}, "
                  f"{deadline - time.monotonic():.0f} s left", flush=True)
            try:
                done, steps = run_job(job, state, options, deadline, steps_left, meta)
            except Exception:  # one job's failure is recorded; the others go on
                record_failure(state, code)
                failed = True
                if args.stop_on_failure:
                    left.append(job.name)
                    spent = True
                continue
            steps_left = None if steps_left is None else max(0, steps_left - steps)
            if not done:
                left.append(job.name)
                spent = True
    finally:
        remove_tree(options.scratch)
        print(save_compile_cache(args.state, int(args.compile_cache_mib * 2**20))
              if args.compile_cache_mib > 0 else "compile cache: none saved (no room)",
              flush=True)
    write_summary(args.state, plan)
    print(f"[campaign +{time.monotonic() - started:.0f}s] "
          f"campaign {plan.name}: {len(left)} job(s) left"
          + (f", next {left[0]}" if left else "") + f"; results in {args.state}/results.csv",
          flush=True)
    return 1 if failed else 3 if left else 0


if __name__ == "__main__":
    sys.exit(main())
