#!/usr/bin/env bash
# gpu/run.sh rehearsed on the CPU with the GPU image's Python (make image-rehearsal): two calls,
# each in a fresh copy of the tree as the device tool sends it (tracked files and untracked ones
# git does not ignore, with gpu/bundle and the table's state carried), what the first packed
# put back through gpu/unpack.sh before the second. The second must resume the first's fit.
#
#   gpu/rehearse.sh IMAGE_PYTHON SCRATCH
#
# On the CPU a packed MolHIV step of Graphormer-slim (4 seeds) takes about 15 s, and a fit's setup
# and its stop's validation and statistics pass some minutes: hence the long calls (about 35
# minutes in all).
set -euo pipefail
PY=${1:?the Python of the image twin}
WORK=${2:?a scratch folder}
REPO=$PWD
rm -rf "$WORK"
mkdir -p "$WORK/here/runs/experiments"
for call in 1 2; do
    tree="$WORK/tree$call"
    mkdir -p "$tree"
    git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$tree"
    cp -r gpu/bundle "$tree/gpu/"
    mkdir -p "$tree/runs/experiments"
    cp -r "$WORK/here/runs/experiments/." "$tree/runs/experiments/"
    cp "$WORK/here"/results/paper_table.* "$tree/results/" 2>/dev/null || true
    # the validations are kept short (2 batches)
    (cd "$tree" && OUT="$WORK/out$call" PYTHON="$PY" ACCELERATOR=cpu \
        SMOKE=$((call == 1)) GRAPHORMER_SEPNORM_GPU_TESTS_DEVICE=cpu \
        GRID_ARGS="--extra --trainer.limit_val_batches 2" SMOKE_S=900 SETUP_S=150 STOP_S=420 \
        LIMIT_S=$((call == 1 ? 1260 : 960)) bash gpu/run.sh) && status=0 || status=$?
    echo "call $call: exit $status; $(ls "$WORK/out$call" | xargs)"
    (cd "$WORK/here" && bash "$REPO/gpu/unpack.sh" "$WORK/out$call" >/dev/null)
done
for call in 1 2; do
    echo "call $call: $(grep -h -E "Restoring states from|Time limit reached" \
        "$WORK"/tree$call/runs/experiments/paper_table/*/fit.log | tr '\n' ' ')"
done
# the second call must have continued the first's fit from its last.ckpt
grep -q "Restoring states from the checkpoint path at .*last.ckpt" \
    "$WORK"/tree2/runs/experiments/paper_table/*/fit.log
"$PY" -c 'import sys, torch
for path in sys.argv[1:]:
    print(path.split("/rehearsal/")[-1], "step", torch.load(path, weights_only=True)["global_step"])' \
    "$WORK"/tree*/runs/experiments/paper_table/*/fit/checkpoints/last.ckpt
echo "rehearsal passed"
