#!/usr/bin/env bash
# One call on a lent GPU machine, at the repository root, gpu/bundle (gpu/bundle.sh) and the
# table's state (runs/experiments/paper_table, put back by gpu/unpack.sh) carried:
#   1. installs the bundle's wheels (the image lacks jsonargparse and its two helpers);
#   2. runs the CUDA smoke check, pytest -m gpu tests/gpu; a failure stops the call (SMOKE=0:
#      no check, for a second call of the same code);
#   3. runs the paper's table, graphormer-sepnorm-experiment: MolHIV, ZINC-subset and ZINC x
#      SepNorm, ShareNorm, seeds 0-3 packed in one fit, configs/presets/gpu_fast.yaml, on the
#      bundle's prepared splits, with the seconds left as --max-time: a fit stopped by it
#      continues from its last.ckpt on the next call;
#   4. packs into $OUT, in pieces under 16 MiB: state.tar.partNN (what the next call needs: the
#      unfinished cells without their best-*.ckpt, and results/<name>.csv and .md) and
#      done.tar.partNN (the finished cells' folders), beside log.txt.
#
#   LIMIT_S=540 bash gpu/run.sh     (device tool: carry gpu/bundle and runs/experiments/paper_table)
#
# Exit status: the grid's (0: the table is done, 3: cells are left, 1: a cell failed); 2: the
# table did not run. Knobs: LIMIT_S (the call's seconds, default 540), RESERVE_S (kept for
# packing, default 45), SETUP_S (a fit's start before its training time counts: data, sanity
# check; default 90), STOP_S (a stopped fit's last validation and save; default 60), SMOKE_S (the smoke check's limit, default 240), PYTHON, NAME, RUNS, RESULTS,
# SEEDS, ACCELERATOR (cpu for the rehearsal), GRID_ARGS (appended to the grid's arguments).
set -uo pipefail
T0=$(date +%s)
: "${OUT:?set OUT: the folder whose files come back}"
PY=${PYTHON:-python3}
NAME=${NAME:-paper_table}
RUNS=${RUNS:-runs/experiments}
RESULTS=${RESULTS:-results}
SEEDS=${SEEDS:-0 1 2 3}
LIMIT_S=${LIMIT_S:-540}
SITE=${SITE:-/tmp/graphormer-sepnorm-site}
mkdir -p "$OUT" "$RUNS/$NAME" "$RESULTS"
LOG="$OUT/log.txt"
say() { echo "[gpu/run.sh +$(( $(date +%s) - T0 ))s] $*" | tee -a "$LOG"; }
left() { echo $(( LIMIT_S - ($(date +%s) - T0) - ${RESERVE_S:-45} )); }
dhms() { printf '%02d:%02d:%02d:%02d' $(($1 / 86400)) $(($1 % 86400 / 3600)) $(($1 % 3600 / 60)) \
    $(($1 % 60)); }

"$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" \
    gpu/bundle/wheels/*.whl >>"$LOG" 2>&1 || { say "installing the wheels failed"; exit 2; }
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
    torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU")' >>"$LOG" 2>&1
STATUS=2
if [ "${SMOKE:-1}" = 1 ]; then
    timeout -k 10 "${SMOKE_S:-240}" "$PY" -m pytest -q -m gpu tests/gpu -p no:cacheprovider \
        >>"$LOG" 2>&1
    SMOKE_STATUS=$?
    say "smoke check: exit $SMOKE_STATUS ($(grep -E '[0-9]+ (passed|failed)' "$LOG" | tail -1))"
    [ "$SMOKE_STATUS" = 0 ] || { echo "smoke check exit $SMOKE_STATUS" >"$OUT/SMOKE_FAILED"; }
fi
SPARE=$(( ${SETUP_S:-90} + ${STOP_S:-60} ))
if [ ! -e "$OUT/SMOKE_FAILED" ] && [ "$(left)" -ge $(( SPARE + 30 )) ]; then
    END=$(( $(date +%s) + $(left) ))
    say "the table with $(left) s, $(( $(left) - SPARE )) s of it training"
    # in a process group of its own (set -m), ended whole at the end: the grid's fits outlive a
    # TERM to it (Lightning catches TERM), and a fit left running would write past the call
    set -m
    # shellcheck disable=SC2086
    "$PY" -m graphormer_sepnorm.experiment --name "$NAME" \
        --configs configs/molhiv.yaml configs/zinc_subset.yaml configs/zinc.yaml \
        --preset configs/presets/gpu_fast.yaml --seeds $SEEDS --packed \
        --accelerator "${ACCELERATOR:-gpu}" --prepared gpu/bundle/data \
        --max-time "$(dhms $(( $(left) - SPARE )))" --runs-dir "$RUNS" \
        --results-dir "$RESULTS" ${GRID_ARGS:-} >>"$LOG" 2>&1 &
    GRID=$!
    (sleep $(( $(left) + 30 )); kill -TERM -- -"$GRID"; sleep 10; kill -KILL -- -"$GRID") \
        2>/dev/null &
    WATCH=$!
    set +m
    wait "$GRID"
    STATUS=$?
    kill -- -"$WATCH" 2>/dev/null
    kill -KILL -- -"$GRID" 2>/dev/null
    say "the table: exit $STATUS$([ "$(date +%s)" -gt "$END" ] && echo ", stopped past its time")"
fi
# a cell is finished when each seed's test wrote its metrics (the grid then wrote its rows)
DONE=() UNFINISHED=()
for cell in "$RUNS/$NAME"/*/; do
    [ -d "$cell" ] || continue
    tested=$(ls "$cell"test*/metrics.csv 2>/dev/null | wc -l)
    if [ "$tested" -ge "$(echo $SEEDS | wc -w)" ]; then DONE+=("${cell%/}")
    else UNFINISHED+=("${cell%/}"); fi
done
STATE=("${UNFINISHED[@]}" $(ls "$RESULTS/$NAME".csv "$RESULTS/$NAME".md 2>/dev/null))
[ "${#STATE[@]}" = 0 ] || tar --exclude='*/fit/checkpoints/best-*.ckpt' -cf - "${STATE[@]}" \
    | split -b 15m -d - "$OUT/state.tar.part"
[ "${#DONE[@]}" = 0 ] || tar -cf - "${DONE[@]}" | split -b 15m -d - "$OUT/done.tar.part"
say "packed ${#UNFINISHED[@]} cell(s) to continue, ${#DONE[@]} finished: $(ls "$OUT" | xargs)"
grep -E "Restoring states|Time limit reached|unfinished|failed" "$LOG" | tail -8
exit "$STATUS"
