"""The runner's rules for starting a job's chunk and for giving up on a failing job."""

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from conftest import PYTHON, REPO, TINY_ARGS, image_env, write_plan

from graphormer_sepnorm.campaign.runner import (
    MAX_FAILURES,
    gave_up,
    record_failure,
    row_commit,
    start_seconds,
)
from graphormer_sepnorm.campaign.state import JobState


def job(tmp_path) -> JobState:
    return JobState(tmp_path / "jobs" / "molhiv-sepnorm", ["fit", "--config", "a.yaml"])


def test_a_chunk_starts_with_the_least_or_its_last_startup_and_a_fifth_more(tmp_path):
    state = job(tmp_path)
    assert start_seconds(state, 90.0, "abc") == 90.0  # never ran
    state.status["chunk_log"] = [{"startup_s": 200.0, "code": "abc"},
                                 {"startup_s": 100.0, "code": "abc"}]
    # the last chunk's, warm or cold
    assert start_seconds(state, 90.0, "abc") == pytest.approx(120.0)
    assert start_seconds(state, 90.0, "def") == 90.0  # another code's startup says nothing
    state.status["chunk_log"].append({"startup_s": None, "code": "abc"})  # stopped early
    assert start_seconds(state, 90.0, "abc") == 90.0
    state.status["chunk_log"] = [{"startup_s": 300.0}]  # logged before chunks had their code
    assert start_seconds(state, 90.0, "abc") == 90.0
    del state.status["chunk_log"]  # a status from before the chunk log
    assert start_seconds(state, 60.0, "abc") == 60.0


def test_failures_count_per_code_and_new_code_tries_again(tmp_path):
    state = job(tmp_path)
    for count in range(1, MAX_FAILURES + 1):
        assert not gave_up(state, "abc1234")
        try:
            raise RuntimeError("cuDNN attention has no gradient for the bias")
        except RuntimeError:
            record_failure(state, "abc1234")
        assert state.status["failures"] == count
    assert gave_up(state, "abc1234")
    assert "no gradient for the bias" in state.status["error"]
    assert not gave_up(state, "def5678")  # a fix lands: the job runs again
    try:
        raise ValueError("another")
    except ValueError:
        record_failure(state, "def5678")
    saved = JobState(state.folder, ["fit", "--config", "a.yaml"]).status
    assert (saved["failures"], saved["failed_commit"]) == (1, "def5678")


def test_rows_carry_the_smoke_checks_verdict_so_far(tmp_path):
    verdict = tmp_path / "verdict"
    assert row_commit("abc1234", None) == "abc1234"  # no smoke check ran
    assert row_commit("abc1234", verdict) == "abc1234+smoke-pending"  # still running
    verdict.write_text("failed\n")
    assert row_commit("abc1234", verdict) == "abc1234+smoke-failed"
    verdict.write_text("passed\n")
    assert row_commit("abc1234", verdict) == "abc1234"


def test_a_status_from_before_the_commit_was_kept_gives_up_as_before(tmp_path):
    state = job(tmp_path)
    state.status["failures"] = MAX_FAILURES
    del state.status["failed_commit"]
    assert gave_up(state, "abc1234")


def test_a_command_killed_mid_chunk_resumes_from_its_last_periodic_save(prepared, tmp_path):
    """A fit saves its resume point while it trains (``--save-every-s``), so a command killed
    past its budget (the backstop, a machine taken back) loses only the steps since."""
    longer = [*TINY_ARGS, "--trainer.max_steps", "400", "--model.total_steps", "400"]
    plan = write_plan(tmp_path / "long.yaml", defaults={
        "presets": ["configs/presets/gpu_fast.yaml"], "args": longer})
    state, job = tmp_path / "state", "zinc_subset-sepnorm*"
    command = [PYTHON, "-m", "graphormer_sepnorm.campaign", str(plan), str(state),
               "--prepared", str(prepared), "--accelerator", "cpu", "--only", job]
    running = subprocess.Popen([*command, "--budget-s", "900", "--save-every-s", "0"],
                               cwd=REPO, env=image_env(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        status = wait_for_resume(state, running, least_steps=12)
    finally:
        running.kill()
        running.wait()
    saved = status["steps"]
    assert 12 <= saved < 400 and status["chunks"] == 0  # killed: its chunk never ended
    done = subprocess.run([*command, "--budget-s", "900"], cwd=REPO, env=image_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    status = json.loads(next((state / "jobs").glob(f"{job}/status.json")).read_text())
    assert status["phase"] == "done" and status["chunk_log"][0]["start_step"] == saved
    assert status["steps"] == 400  # the longer schedule: the later arguments win


def wait_for_resume(state: Path, process: subprocess.Popen, least_steps: int) -> dict:
    """The first job's status once it points to a resume point at ``least_steps`` or later."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        for path in (state / "jobs").glob("*/status.json"):
            try:
                status = json.loads(path.read_text())
            except ValueError:  # being replaced
                continue
            if status["resume"] and status["steps"] >= least_steps:
                return status
        time.sleep(0.05)
    raise AssertionError(f"no resume point at step {least_steps} (exit {process.poll()})")


def test_stop_on_failure_starts_no_job_after_a_failed_one(prepared, tmp_path):
    """A lease's first try (``gpu/run.sh``) stops at a failed job, so that its minutes go to the
    fallback's second try; without the flag the jobs after it run."""
    partial = tmp_path / "prepared"
    shutil.copytree(prepared, partial)
    shutil.rmtree(partial / "zinc_subset")  # the zinc_subset job fails: no data
    plan = write_plan(tmp_path / "failing.yaml")
    command = [PYTHON, "-m", "graphormer_sepnorm.campaign", str(plan), "STATE", "--prepared",
               str(partial), "--accelerator", "cpu", "--budget-s", "900", "--only",
               "molhiv-*", "zinc_subset-sharenorm*"]
    for flag, ran in (["--stop-on-failure"], False), ([], True):
        state = tmp_path / f"state{len(flag)}"
        done = subprocess.run([*[str(state) if a == "STATE" else a for a in command], *flag],
                              cwd=REPO, env=image_env(), capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
        failed = next((state / "jobs").glob("zinc_subset-sharenorm*/status.json"))
        status = json.loads(failed.read_text())
        assert status["failures"] == 1 and status["error"]
        assert any((state / "jobs").glob("molhiv-*/status.json")) == ran, flag
