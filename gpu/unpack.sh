#!/usr/bin/env bash
# Puts back here what gpu/run.sh packed (FILES: the folder of its state.tar.partNN and
# done.tar.partNN pieces): the unfinished cells into runs/experiments/<name> (carry it to the next
# call), the finished cells into runs/gpu_done/ (kept here, not carried), and the results,
# results/<name>.csv and .md (commit them).
#
#   gpu/unpack.sh FILES_AT
set -euo pipefail
FILES=${1:?the folder with the state.tar.part* pieces}
NAME=${NAME:-paper_table}
RUNS=${RUNS:-runs/experiments}
rm -rf "${RUNS:?}/$NAME"
mkdir -p "$RUNS/$NAME"
if ls "$FILES"/state.tar.part* >/dev/null 2>&1; then
    cat "$FILES"/state.tar.part* | tar -x
fi
if ls "$FILES"/done.tar.part* >/dev/null 2>&1; then
    mkdir -p runs/gpu_done
    cat "$FILES"/done.tar.part* | tar -x -C runs/gpu_done
fi
echo "to carry: $(du -sh "$RUNS/$NAME" gpu/bundle 2>/dev/null | xargs)"
cat "results/$NAME.md" 2>/dev/null || true
