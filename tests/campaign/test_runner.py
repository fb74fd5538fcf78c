"""The runner's rules for starting a job's chunk and for giving up on a failing job."""

import pytest

from graphormer_sepnorm.campaign.runner import MAX_FAILURES, gave_up, record_failure, start_seconds
from graphormer_sepnorm.campaign.state import JobState


def job(tmp_path) -> JobState:
    return JobState(tmp_path / "jobs" / "molhiv-sepnorm", ["fit", "--config", "a.yaml"])


def test_a_chunk_starts_with_the_least_or_its_last_startup_and_a_fifth_more(tmp_path):
    state = job(tmp_path)
    assert start_seconds(state, 90.0) == 90.0  # never ran
    state.status["chunk_log"] = [{"startup_s": 200.0}, {"startup_s": 100.0}]
    assert start_seconds(state, 90.0) == pytest.approx(120.0)  # the last chunk's, warm or cold
    state.status["chunk_log"].append({"startup_s": None})  # stopped before its first step
    assert start_seconds(state, 90.0) == 90.0
    del state.status["chunk_log"]  # a status from before the chunk log
    assert start_seconds(state, 60.0) == 60.0


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


def test_a_status_from_before_the_commit_was_kept_gives_up_as_before(tmp_path):
    state = job(tmp_path)
    state.status["failures"] = MAX_FAILURES
    del state.status["failed_commit"]
    assert gave_up(state, "abc1234")
