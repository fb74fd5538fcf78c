"""The rehearsal of a lent GPU's command, on the CPU: gpu/run.sh, interrupted and resumed.

As on the GPU machine: the bundle's wheels installed with ``pip --no-index --target``, RDKit and
ogb unimportable, prepared splits only, the state handed back through ``$OUT`` in pieces and
unpacked for the next command (``gpu/unpack.sh``). The plan (``conftest.write_plan``: a packed
fit of two seeds, an unpacked one, a MolHIV one, with the GPU preset) run in one command and
run in many, cut by a budget of seconds and then of steps, must give the same results CSV.
"""

import importlib.metadata
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PYTHON, REPO, image_env, write_plan

from graphormer_sepnorm.experiment import read_rows
from graphormer_sepnorm.gpu_bundle import BUNDLE_PACKAGES, IMAGE_PACKAGES, download_wheels


@pytest.fixture(scope="module")
def bundle(prepared, tmp_path_factory) -> Path:
    """A bundle as ``make gpu-bundle`` makes it: wheels and the tiny prepared splits."""
    folder = tmp_path_factory.mktemp("bundle")
    made = REPO / "gpu" / "bundle" / "wheels"
    if made.is_dir() and len(list(made.glob("*.whl"))) == len(BUNDLE_PACKAGES):
        shutil.copytree(made, folder / "wheels")
    else:
        download_wheels(folder / "wheels")
    shutil.copytree(prepared, folder / "data")
    return folder


def command(plan: Path, state: Path, out: Path, bundle: Path, record: Path,
            campaign_args: str = "", **extra: str) -> int:
    env = image_env(**{"OUT": str(out), "CPU": "1", "STATE": str(state), "BUNDLE": str(bundle),
                       "SITE": str(bundle.parent / "site"), "PYTHON": PYTHON, "LIMIT_S": "900",
                       "RESERVE_S": "0", "COMMIT": "rehearsal", "CAMPAIGN_ARGS": campaign_args,
                       "IMAGE_SITE_RECORD": str(record), **extra})
    done = subprocess.run(["bash", "gpu/run.sh", str(plan)], cwd=REPO, env=env, timeout=900,
                          capture_output=True, text=True)
    assert done.returncode in (0, 3), (out / "log.txt").read_text()[-4000:]
    assert len(list(out.iterdir())) <= 8
    return done.returncode


def unpack(out: Path, state: Path) -> None:
    subprocess.run(["bash", "gpu/unpack.sh", str(out), str(state)], cwd=REPO, check=True,
                   capture_output=True)


def test_interrupted_and_resumed_ends_with_the_same_results(bundle, tmp_path):
    plan = write_plan(tmp_path / "rehearsal.yaml")
    record = tmp_path / "imported.txt"
    assert command(plan, tmp_path / "whole", tmp_path / "out-whole", bundle, record) == 0
    unpack(tmp_path / "out-whole", tmp_path / "whole-back")
    whole = read_rows(tmp_path / "whole-back" / "results.csv")
    # a budget of 3 s: the first fit stops at its first safe step; then 5 steps a command
    statuses, state = [], tmp_path / "state-0"
    for k in range(40):
        args = "--budget-s 3 --min-start-s 0" if k == 0 else "--budget-steps 5 --min-start-s 0"
        out = tmp_path / f"out-{k}"
        statuses.append(command(plan, state, out, bundle, record, args))
        state = tmp_path / f"state-{k + 1}"
        unpack(out, state)
        if statuses[-1] == 0:
            break
    assert statuses.count(3) >= 2 and statuses[-1] == 0, statuses
    pieces = read_rows(state / "results.csv")
    assert [r["seed"] for r in whole] == ["0", "1", "2", "0"]
    assert len(pieces) == len(whole)
    for a, b in zip(whole, pieces, strict=True):
        for key in ("dataset", "norm", "seed", "best_step", "steps", "monitor", "test_metric"):
            assert a[key] == b[key], key
        for key in ("best_val", "test_value"):
            assert float(b[key]) == pytest.approx(float(a[key]), abs=1e-6), key
        assert int(a["chunks"]) == 1
    assert max(int(r["chunks"]) for r in pieces) >= 3  # resumed more than once
    assert pieces[0]["best_step"] != "" and float(whole[0]["best_val"]) > 0
    for path in (state / "jobs").glob("*/status.json"):  # each chunk logged, with its speed
        status = json.loads(path.read_text())
        chunks = status["chunk_log"]
        assert len(chunks) == status["chunks"] and sum(c["steps"] for c in chunks) == status[
            "steps"], path
        assert all(c["startup_s"] > 0 and c["seconds"] >= c["startup_s"] for c in chunks)
    check_imports(record)


def check_imports(record: Path) -> None:
    """Every module those processes imported is the standard library's, the package's, the
    image's or the bundle's."""
    allowed = {_norm(line) for line in IMAGE_PACKAGES.read_text().splitlines()
               if line and not line.startswith("#")} | {_norm(p) for p in BUNDLE_PACKAGES}
    owners = importlib.metadata.packages_distributions()
    names = set(record.read_text().split())
    foreign = {name: owners[name] for name in names
               if name in owners and name not in sys.stdlib_module_names
               and name != "graphormer_sepnorm"
               and not {_norm(d) for d in owners[name]} & allowed}
    assert not foreign, f"imported, but neither on the GPU image nor in the bundle: {foreign}"
    assert {"rdkit", "ogb"}.isdisjoint(names) and "jsonargparse" in names


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(".", "-")


def failing_smoke(tmp_path: Path, seconds: float = 0) -> Path:
    """A smoke check that fails after ``seconds``."""
    failing = tmp_path / "smoke" / "test_smoke.py"
    failing.parent.mkdir()
    failing.write_text("import time\n\nimport pytest\n\n\n@pytest.mark.gpu\ndef test_fails():\n"
                       f"    time.sleep({seconds})\n    assert False\n")
    return failing


def test_a_failed_smoke_check_trains_anyway_and_marks_every_result(bundle, tmp_path):
    """A lease is rare: a failing smoke check is logged and flagged, and the campaign still runs
    (``SMOKE_MODE=first``: the verdict is known before any row is written)."""
    plan, out = write_plan(tmp_path / "smoke.yaml"), tmp_path / "out"
    assert command(plan, tmp_path / "state", out, bundle, tmp_path / "imported.txt",
                   SMOKE_DEVICE="cpu", SMOKE_TESTS=str(failing_smoke(tmp_path)),
                   SMOKE_MODE="first") == 0
    assert "smoke check exit 1" in (out / "SMOKE_FAILED").read_text()
    assert "SMOKE CHECK FAILED" in (out / "log.txt").read_text()
    unpack(out, tmp_path / "back")
    rows = read_rows(tmp_path / "back" / "results.csv")
    assert len(rows) == 4 and {r["commit"] for r in rows} == {"rehearsal+smoke-failed"}


def test_a_smoke_check_beside_the_campaign_marks_what_it_can(bundle, tmp_path):
    """By default the smoke check runs beside the campaign: rows written before its verdict say
    ``+smoke-pending``, after a failure ``+smoke-failed``; none goes unmarked, and its output
    still reaches the log. Each job's fit profiled a few of its steps into its state."""
    plan, out = write_plan(tmp_path / "smoke.yaml"), tmp_path / "out"
    assert command(plan, tmp_path / "state", out, bundle, tmp_path / "imported.txt",
                   "--profile-after 3 --profile-steps 4", SMOKE_DEVICE="cpu",
                   SMOKE_TESTS=str(failing_smoke(tmp_path, 5))) == 0
    log = (out / "log.txt").read_text()
    assert "smoke check started beside the campaign" in log and "SMOKE CHECK FAILED" in log
    assert "1 failed" in log and (out / "SMOKE_FAILED").is_file()
    unpack(out, tmp_path / "back")
    rows = read_rows(tmp_path / "back" / "results.csv")
    assert len(rows) == 4
    assert {r["commit"] for r in rows} <= {"rehearsal+smoke-failed", "rehearsal+smoke-pending"}
    profiles = sorted((tmp_path / "back" / "jobs").glob("*/profile-rehearsal.txt"))
    assert len(profiles) == 3
    for path in profiles:
        assert f"## {path.parent.name} at rehearsal (4 steps)" in path.read_text()


def test_a_campaign_past_its_budget_is_stopped_and_its_state_still_comes_back(bundle, tmp_path):
    """The backstop: a campaign that does not stop in time (as a cold compile once ran past the
    budget on a lent GPU, and the tool's kill took the state with it) is stopped by
    ``timeout`` 15 s after its budget, and what it saved is packed into ``$OUT`` anyway. A
    limit already spent by the steps before (here 1 s) still gives the backstop 15 s."""
    stuck = tmp_path / "python"
    stuck.write_text("#!/usr/bin/env bash\n"
                     'if [ "$2" = graphormer_sepnorm.campaign ]; then\n'
                     '  mkdir -p "$4/jobs/stuck" && echo saved > "$4/jobs/stuck/status.json"\n'
                     "  exec sleep 600\nfi\n"
                     f'exec {PYTHON} "$@"\n')
    stuck.chmod(0o755)
    out, state = tmp_path / "out", tmp_path / "state"
    env = image_env(OUT=str(out), CPU="1", STATE=str(state), BUNDLE=str(bundle),
                    SITE=str(bundle.parent / "site"), PYTHON=str(stuck), LIMIT_S="1",
                    RESERVE_S="0", COMMIT="rehearsal", IMAGE_SITE_RECORD=str(tmp_path / "r"))
    done = subprocess.run(["bash", "gpu/run.sh", str(write_plan(tmp_path / "p.yaml"))],
                          cwd=REPO, env=env, timeout=120, capture_output=True, text=True)
    log = (out / "log.txt").read_text()
    assert done.returncode == 124, log
    assert "campaign stopped by the backstop (exit 124)" in log
    unpack(out, tmp_path / "back")
    assert (tmp_path / "back" / "jobs" / "stuck" / "status.json").read_text() == "saved\n"


def test_a_log_over_the_tools_limit_keeps_its_head_and_tail(tmp_path):
    log = tmp_path / "log.txt"
    log.write_bytes(b"a" * 600 + b"b" * 400)
    subprocess.run(["bash", "gpu/cut_log.sh", str(log), "2000"], cwd=REPO, check=True)
    assert log.read_bytes() == b"a" * 600 + b"b" * 400  # under the limit: as it was
    subprocess.run(["bash", "gpu/cut_log.sh", str(log), "500"], cwd=REPO, check=True)
    head, note, tail = log.read_bytes().split(b"\n")
    assert head == b"a" * 250 and tail == b"b" * 250
    assert note == b"[gpu/cut_log.sh: 500 bytes cut here; the first and last 250 kept]"


def test_a_failed_first_try_gives_its_minutes_to_the_math_attention(bundle, tmp_path):
    """Two leases lost their minutes to a CUDA-only failure of the fused attention: the first
    try stops at a failed job, and a second try with ``GRAPHORMER_SEPNORM_CUDA_ATTENTION=math``
    trains in the time left, on the grid (``GRAPHORMER_SEPNORM_TOKEN_ROWS=0``: token rows are
    new, 2026-11-28) and without combo kernels (``GRAPHORMER_SEPNORM_COMBO_KERNELS=0``, new too).
    The failure is staged by an interpreter that fails the campaign unless all three are
    chosen."""
    python = tmp_path / "python"
    python.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$2" = graphormer_sepnorm.campaign ] '
        '&& { [ "${GRAPHORMER_SEPNORM_CUDA_ATTENTION:-}" != math ] '
        '|| [ "${GRAPHORMER_SEPNORM_TOKEN_ROWS:-}" != 0 ] '
        '|| [ "${GRAPHORMER_SEPNORM_COMBO_KERNELS:-}" != 0 ]; }; then\n'
        '    echo "first try: $*"; echo "RuntimeError: LSE is not correctly aligned"; exit 1\n'
        f'fi\nexec {PYTHON} "$@"\n')
    python.chmod(0o755)
    plan, out = write_plan(tmp_path / "fallback.yaml"), tmp_path / "out"
    assert command(plan, tmp_path / "state", out, bundle, tmp_path / "imported.txt",
                   "--only zinc_subset-sharenorm*", PYTHON=str(python), FALLBACK="1") == 0
    log = (out / "log.txt").read_text()
    assert "--stop-on-failure" in log.split("first try: ")[1].splitlines()[0]
    assert "campaign with" in log and "CUDA attention math" in log and "combo kernels 0" in log
    assert "math kernel on the grid took over" in (out / "FALLBACK_MATH").read_text()
    unpack(out, tmp_path / "back")
    assert [r["norm"] for r in read_rows(tmp_path / "back" / "results.csv")] == ["sharenorm"]
