#!/usr/bin/env bash
# Keeps a log under the device tool's 16 MiB a file: when LOG is over MAX bytes (default
# 15,000,000), only its first and last MAX/2 bytes stay, with a line saying so between them.
# TORCH_LOGS=cudagraphs can write a line per step when CUDA graphs are not replayed.
#
#   gpu/cut_log.sh "$OUT/log.txt" [MAX]
set -euo pipefail
LOG=${1:?the log}
MAX=${2:-15000000}
SIZE=$(stat -c %s "$LOG")
[ "$SIZE" -le "$MAX" ] && exit 0
HALF=$(( MAX / 2 ))
{ head -c "$HALF" "$LOG"
  printf '\n[gpu/cut_log.sh: %d bytes cut here; the first and last %d kept]\n' \
      $(( SIZE - 2 * HALF )) "$HALF"
  tail -c "$HALF" "$LOG"; } >"$LOG.cut"
mv "$LOG.cut" "$LOG"
