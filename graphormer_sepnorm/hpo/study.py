"""The study's storage, and which worker runs which trial: claims, heartbeats, stale trials.

A study lives in one folder, ``runs/hpo/<name>/``: Optuna's journal file ``study.journal``
(Optuna's ``JournalStorage``, a plain file that processes on several machines
append to under Optuna's own lock), or a database given by URL, and a folder per trial,
``trial_0000/``, where the trial's fit logs and checkpoints.

Optuna's journal marks a trial RUNNING from the moment a worker asks for it until the worker
tells its result; a worker that dies in between (SIGKILL, a lost node, a job's end) leaves it
RUNNING forever, and the journal has no heartbeat to tell. Here the worker that claims a trial
writes ``trial_XXXX/heartbeat.json`` (its host and process id) and touches it every
``interval`` seconds while the trial's fit runs. A RUNNING trial is stale, and the next worker
takes it over, when its heartbeat file is missing, says it was released (the fit stopped at
``--max-time``, or the worker was interrupted), names a process of this host that no longer
exists, or was last touched more than ``grace`` seconds ago (another host). The worker that
takes it over continues the fit from its ``last.ckpt`` with the parameters the journal holds.
Claims are made under a lock file beside the journal (Optuna's
``JournalFileOpenLock``, made for NFS), so that two workers never
claim the same trial and the study never gets more trials than asked for.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock, JournalStorage
from optuna.trial import TrialState

__all__ = ["Claim", "Heartbeat", "claim_lock", "is_stale", "open_storage", "release",
           "trial_dir", "trial_handle", "write_heartbeat"]


def open_storage(spec: str) -> BaseStorage | str:
    """The study's storage: a database URL as given, else a journal file at that path.

    The journal is written under Optuna's NFS-safe open lock; a URL is ``sqlite:///...``,
    ``postgresql://...`` or any other Optuna takes.
    """
    if "://" in spec:
        return spec
    Path(spec).parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(spec, lock_obj=JournalFileOpenLock(spec)))


def trial_dir(folder: Path, number: int) -> Path:
    """``folder/trial_0007`` for trial 7."""
    return folder / f"trial_{number:04d}"


def trial_handle(study: optuna.Study, number: int) -> optuna.trial.Trial:
    """An ``optuna.trial.Trial`` of the study's trial ``number`` (RUNNING), to report to.

    Optuna gives a worker its ``Trial`` from ``ask``; a fit that runs in another process, or a
    worker that takes over a stale trial, rebuilds it from the trial's id (Optuna keeps no
    public map from number to id).
    """
    frozen = next(t for t in study.get_trials(deepcopy=False) if t.number == number)
    return optuna.trial.Trial(study, frozen._trial_id)


@contextmanager
def claim_lock(folder: Path, grace: int = 120) -> Iterator[None]:
    """Holds the study's claim lock (``folder/claims.lock``), across processes and hosts."""
    lock = JournalFileOpenLock(str(folder / "claims"), grace_period=grace)
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


def write_heartbeat(folder: Path, released: bool = False) -> None:
    """Writes ``folder/heartbeat.json``: this host and process (or that it was released)."""
    folder.mkdir(parents=True, exist_ok=True)
    state = {"host": socket.gethostname(), "pid": os.getpid(), "released": released,
             "written": time.time()}
    partial = folder / f".heartbeat.{os.getpid()}.{threading.get_ident()}"
    partial.write_text(json.dumps(state))
    os.replace(partial, folder / "heartbeat.json")


def release(folder: Path) -> None:
    """Marks the trial of ``folder`` free for the next worker to continue."""
    write_heartbeat(folder, released=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def is_stale(folder: Path, grace: float) -> bool:
    """Whether the RUNNING trial of ``folder`` has no live worker (see the module docstring)."""
    path = folder / "heartbeat.json"
    try:
        state: dict[str, Any] = json.loads(path.read_text())
        touched = path.stat().st_mtime
    except (OSError, ValueError):
        return True
    if state.get("released"):
        return True
    if state.get("host") == socket.gethostname() and not _alive(int(state["pid"])):
        return True
    return time.time() - touched > grace


class Heartbeat:
    """Touches a trial's ``heartbeat.json`` every ``interval`` seconds, in a thread.

    Used as ``with Heartbeat(folder, 60): run the fit``.
    """

    def __init__(self, folder: Path, interval: float) -> None:
        self.path, self.interval = folder / "heartbeat.json", interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                os.utime(self.path)
            except OSError:
                pass

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass(frozen=True)
class Claim:
    """A trial a worker runs: its number, its parameters, and whether it was taken over."""

    number: int
    params: dict[str, Any]
    resumed: bool


def stale_trial(study: optuna.Study, folder: Path, grace: float) -> Claim | None:
    """The first RUNNING trial that no live worker runs, claimed (call under the lock)."""
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        where = trial_dir(folder, trial.number)
        if is_stale(where, grace):
            write_heartbeat(where)
            return Claim(trial.number, dict(trial.params), True)
    return None


def counted(study: optuna.Study) -> int:
    """Trials that count towards ``--trials``: every one but those waiting in the queue."""
    return sum(t.state != TrialState.WAITING for t in study.get_trials(deepcopy=False))
