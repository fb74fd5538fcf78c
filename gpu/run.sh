#!/usr/bin/env bash
# One command on a lent GPU machine: install the bundle, check CUDA, advance the campaign, and
# leave its state in $OUT. The call (device tool, at the repository root, gpu/bundle carried):
#
#   LIMIT_S=580 COMMIT=<git short hash> bash gpu/run.sh campaigns/paper_table.yaml
#
# Steps: (1) the bundle's wheels (jsonargparse & co.) into $SITE with pip --no-index --target;
# (2) optionally (STEP_BENCH=1) benchmarks/gpu_step.py on the bundle's data, its profiles to $OUT
# (STEP_BENCH_ARGS, e.g. "--datasets zinc_subset --k 4"; STEP_BENCH_S, its limit, default 240);
# (3) the campaign on the state folder campaigns/state/<plan> with the seconds left, under a
# backstop `timeout`, and beside it the CUDA smoke check, pytest -m gpu tests/gpu (it took
# 150 s of a lease's 600 before the campaign, 2026-11-27; SMOKE_MODE=first runs it before
# step 2 instead). A lease is rare, so a failure does not stop the command (SMOKE_FAIL=stop
# does, with SMOKE_MODE=first): it is logged, $OUT/SMOKE_FAILED is written and each results
# row of this command carries "+smoke-failed" in its commit column ("+smoke-pending" when
# written before the verdict), for a later session to read log.txt and keep or drop them
# (the committed state can be reverted); (4) the state folder, cut into pieces of at most
# 15 MiB (state.tar.partNN), and log.txt to $OUT. Back here:
# `gpu/unpack.sh FILES_AT` puts the state in place; commit it. Exit status: the campaign's
# (0 all done, 3 work left, 1 a job failed; 124 or 137 when the backstop stopped it), 2 when it
# did not run.
#
# CPU=1 is the rehearsal on a machine without CUDA (tests/campaign/test_rehearsal.py):
# --accelerator cpu, and no smoke check unless SMOKE_DEVICE=cpu (its tests on the CPU;
# SMOKE_TESTS: which, default tests/gpu; SMOKE_MODE=off: none). On the GPU a campaign whose
# first try fails a job tries again with the math attention on the grid (FALLBACK=0: not;
# $OUT/FALLBACK_MATH says it happened). Other knobs: STATE, BUNDLE, SITE, PYTHON, RESERVE_S
# (seconds kept for step 4 and the tool's margin, default 45), CAMPAIGN_ARGS (appended to the
# campaign's).
set -uo pipefail
T0=$(date +%s)
PLAN=${1:-campaigns/paper_table.yaml}
STATE=${STATE:-campaigns/state/$(basename "$PLAN" .yaml)}
BUNDLE=${BUNDLE:-gpu/bundle}
SITE=${SITE:-/tmp/graphormer-sepnorm-site}
PY=${PYTHON:-python3}
LIMIT_S=${LIMIT_S:-600}
RESERVE_S=${RESERVE_S:-45}
: "${OUT:?set OUT: the folder whose files come back}"
mkdir -p "$OUT" "$STATE"
LOG="$OUT/log.txt"
say() { echo "[gpu/run.sh +$(( $(date +%s) - T0 ))s] $*" | tee -a "$LOG"; }

say "plan $PLAN, state $STATE, limit ${LIMIT_S}s, commit ${COMMIT:-unknown}, CUDA attention" \
    "${GRAPHORMER_SEPNORM_CUDA_ATTENTION:-efficient}"
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$BUNDLE"/wheels/*.whl >>"$LOG" 2>&1 \
    || { say "bundle install failed"; exit 2; }
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
# torch 2.11's Triton tiling analysis asserted on the training step (graphormer_sepnorm/
# compiling.py passes the same switch to each compile; this covers any compile it misses)
export TORCHINDUCTOR_COALESCE_TILING_ANALYSIS=0 PYTHONUNBUFFERED=1
# inductor's default cache folder, named so that its size can be logged: whether carrying it
# to the next lease (no compiling twice) would fit the tool's 64 MiB
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/torchinductor_$(id -un)}
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' \
    >>"$LOG" 2>&1
VERDICT="${TMPDIR:-/tmp}/graphormer-sepnorm-smoke.$$.verdict"
SMOKE_LOG="${TMPDIR:-/tmp}/graphormer-sepnorm-smoke.$$.log"
SMOKE_PID=
smoke() {  # the smoke check, within $1 seconds; its verdict file says passed or failed
    # on the CPU the Triton kernels' tests run through Triton's interpreter, which must be on
    # before anything imports Triton
    local interpret=0
    [ "${GRAPHORMER_SEPNORM_GPU_TESTS_DEVICE:-cuda}" = cpu ] && interpret=1
    TRITON_INTERPRET=$interpret timeout -k 10 "$1" "$PY" -m pytest -q -m gpu \
        "${SMOKE_TESTS:-tests/gpu}" -p no:cacheprovider >"$SMOKE_LOG" 2>&1
    local status=$?
    if [ "$status" = 0 ]; then echo passed >"$VERDICT"; else echo failed >"$VERDICT"; fi
    return "$status"
}
smoke_report() {  # once it ended ($1: its exit status): its output into the log, and flags
    cat "$SMOKE_LOG" >>"$LOG"
    say "smoke check: exit $1 ($(grep -E '[0-9]+ (passed|failed)' "$SMOKE_LOG" | tail -1))"
    if [ "$1" != 0 ]; then
        say "SMOKE CHECK FAILED: the campaign trained anyway; its rows say +smoke-failed, or" \
            "+smoke-pending for those written before the verdict (see above)"
        echo "smoke check exit $1; see log.txt" >"$OUT/SMOKE_FAILED"
    fi
}
SMOKE_RUNS=1
VERDICT_ARGS=()  # the campaign marks its rows with the smoke check's verdict
if [ "${CPU:-0}" = 1 ]; then
    ACCELERATOR=cpu
    [ -n "${SMOKE_DEVICE:-}" ] || SMOKE_RUNS=0
    export GRAPHORMER_SEPNORM_GPU_TESTS_DEVICE=${SMOKE_DEVICE:-cpu}
else
    ACCELERATOR=gpu
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >>"$LOG" 2>&1
fi
# SMOKE_MODE=off: none (a short call on code whose smoke check passed in the same session)
[ "${SMOKE_MODE:-parallel}" = off ] && SMOKE_RUNS=0
[ "$SMOKE_RUNS" = 1 ] && VERDICT_ARGS=(--smoke-verdict "$VERDICT")
if [ "$SMOKE_RUNS" = 1 ] && [ "${SMOKE_MODE:-parallel}" = first ]; then
    smoke 180
    STATUS=$?
    smoke_report "$STATUS"
    [ "$STATUS" != 0 ] && [ "${SMOKE_FAIL:-continue}" = stop ] && exit 2
fi
if [ "${STEP_BENCH:-0}" = 1 ]; then
    # recompiles and CUDA graph skips logged with their reasons (STEP_BENCH_LOGS= for none);
    # KILL 10 s after TERM: Lightning catches TERM and went on (the second lease lost its
    # campaign that way)
    # shellcheck disable=SC2086
    TORCH_LOGS="${STEP_BENCH_LOGS-recompiles,cudagraphs}" timeout -k 10 "${STEP_BENCH_S:-240}" \
        "$PY" benchmarks/gpu_step.py --prepared "$BUNDLE/data" --profile-dir "$OUT" \
        ${STEP_BENCH_ARGS:-} >>"$LOG" 2>&1
    say "gpu_step: $(grep '^gpu_step ' "$LOG" | tail -1)"
fi
LEFT=$(( LIMIT_S - ($(date +%s) - T0) - RESERVE_S ))
if [ "$SMOKE_RUNS" = 1 ] && [ "${SMOKE_MODE:-parallel}" != first ]; then
    # beside the campaign, whose first minutes compile on the CPU while the GPU waits; after
    # the step benchmark, whose timing it would disturb
    smoke $(( LEFT < 180 ? (LEFT > 10 ? LEFT : 10) : 180 )) &
    SMOKE_PID=$!
    say "smoke check started beside the campaign"
fi
# The campaign stops itself in time; `timeout` is the backstop (a first lease, 2026-11-27, ran
# past its budget and the tool's kill took the state with it): TERM 15 s after the budget,
# KILL 10 s later, and the state saved so far is packed below either way.
# Recompiles and CUDA graph skips go to the log with their reasons (CAMPAIGN_LOGS= for none):
# the fits' own pace is in each job's status.json (chunk_log), and a profile of PROFILE_STEPS
# steps (default 20; 0: none) of each job's fit, once per code, in its profile-<commit>.txt.
campaign() {  # the campaign within $1 seconds; further arguments are appended to its own
    local seconds=$1
    shift
    say "campaign with ${seconds}s, CUDA attention ${GRAPHORMER_SEPNORM_CUDA_ATTENTION:-efficient}," \
        "token rows ${GRAPHORMER_SEPNORM_TOKEN_ROWS:-1}, sequences ${GRAPHORMER_SEPNORM_SEQUENCES:-1}," \
        "combo kernels ${GRAPHORMER_SEPNORM_COMBO_KERNELS:-1}," \
        "row attention ${GRAPHORMER_SEPNORM_ROW_ATTENTION:-1}"
    # shellcheck disable=SC2086
    TORCH_LOGS="${CAMPAIGN_LOGS-recompiles,cudagraphs}" \
    timeout -k 10 $(( seconds > 0 ? seconds + 15 : 15 )) "$PY" -m graphormer_sepnorm.campaign \
        "$PLAN" "$STATE" \
        --budget-s "$seconds" --prepared "$BUNDLE/data" --accelerator "$ACCELERATOR" \
        --commit "${COMMIT:-unknown}" "${VERDICT_ARGS[@]}" \
        --profile-steps "${PROFILE_STEPS:-20}" --compile-cache-mib "$COMPILE_CACHE_MIB" \
        "$@" ${CAMPAIGN_ARGS:-} \
        >>"$LOG" 2>&1
}
# What the campaign compiled goes to the next lease in the state (STATE/compile-cache), within
# the 64 MiB the device tool carries (the tree as it came, the bundle included): what is left,
# less 4 MiB for the state's growth, at most 12 MiB (COMPILE_CACHE_MIB sets it).
TREE_KIB=$(du -sk --exclude=.git --exclude='.venv*' . | cut -f1)
OLD_KIB=$(du -sk "$STATE/compile-cache" 2>/dev/null | cut -f1)
ROOM_MIB=$(( (64 * 1024 - TREE_KIB + ${OLD_KIB:-0} - 4 * 1024) / 1024 ))
ROOM_MIB=$(( ROOM_MIB < 0 ? 0 : (ROOM_MIB > 12 ? 12 : ROOM_MIB) ))
COMPILE_CACHE_MIB=${COMPILE_CACHE_MIB:-$ROOM_MIB}
say "compile cache: up to ${COMPILE_CACHE_MIB} MiB (tree ${TREE_KIB} KiB as it came)"
# Two leases trained nothing: each hit a CUDA-only failure of the fused attention in the first
# packed fit, and the jobs after it would have failed the same way. Unless the attention is
# chosen (GRAPHORMER_SEPNORM_CUDA_ATTENTION) or FALLBACK=0, the first try stops at a failed
# job, and the seconds left go to a second try with SDPA's math kernel (slower, proven on
# every path) and without token rows or attention sequences (GRAPHORMER_SEPNORM_TOKEN_ROWS=0:
# the grid, proven on an H200; both are new since 2026-11-28) or inductor's combo kernels
# (GRAPHORMER_SEPNORM_COMBO_KERNELS=0, also new; without rows there is no row attention
# either, GRAPHORMER_SEPNORM_ROW_ATTENTION, whose Triton kernels check themselves against
# their reference on first use and step aside with a warning), which retries that job (a job
# is given up after two failures with one code) and goes on past a failure. On the GPU by
# default; FALLBACK=1 on the CPU (its test).
FALLBACK_ARGS=()
if [ "${FALLBACK:-$([ "$ACCELERATOR" = gpu ] && echo 1)}" = 1 ] \
        && [ -z "${GRAPHORMER_SEPNORM_CUDA_ATTENTION:-}" ]; then
    FALLBACK_ARGS=(--stop-on-failure)
fi
campaign "$LEFT" "${FALLBACK_ARGS[@]}"
STATUS=$?
LEFT=$(( LIMIT_S - ($(date +%s) - T0) - RESERVE_S ))
# 1: a job failed; above 124 with time left: the process died (a crash, not the backstop)
if [ "$STATUS" != 0 ] && [ "$STATUS" != 3 ] && [ "$LEFT" -ge 60 ] \
        && [ "${#FALLBACK_ARGS[@]}" -gt 0 ]; then
    say "a job failed with the efficient attention, token rows/sequences and combo kernels (see" \
        "above): the campaign again with SDPA's math kernel, on the grid, without combo kernels," \
        "and ${LEFT}s"
    echo "efficient attention, token rows/sequences: a job failed; the math kernel on the grid" \
        "took over" >"$OUT/FALLBACK_MATH"
    export GRAPHORMER_SEPNORM_CUDA_ATTENTION=math GRAPHORMER_SEPNORM_TOKEN_ROWS=0 \
        GRAPHORMER_SEPNORM_COMBO_KERNELS=0
    campaign "$LEFT"
    STATUS=$?
fi
[ "$STATUS" -ge 124 ] && say "campaign stopped by the backstop (exit $STATUS)"
if [ -n "$SMOKE_PID" ]; then
    wait "$SMOKE_PID"
    smoke_report $?
fi
say "inductor cache: $(du -sh "$TORCHINDUCTOR_CACHE_DIR" 2>/dev/null | cut -f1) in" \
    "$(find "$TORCHINDUCTOR_CACHE_DIR" -type f 2>/dev/null | wc -l) files"
tar -C "$STATE" -cf - . | split -b 15m -d - "$OUT/state.tar.part"
PIECES=$(ls "$OUT"/state.tar.part* | wc -l)
say "campaign exit $STATUS; state $(du -sk "$STATE" | cut -f1) KiB in $PIECES piece(s)"
grep -E "^(\[campaign |campaign |[a-z_]+-(sepnorm|sharenorm)-seed)" "$LOG" | tail -20
bash "$(dirname "$0")/cut_log.sh" "$LOG"
exit $STATUS
