#!/usr/bin/env bash
# Puts a campaign state that came back from gpu/run.sh (FILES: the folder holding its
# state.tar.partNN pieces) in place of STATE, then shows what it holds. Commit it right away:
# the next lease, in whatever session, continues from what is committed.
#
#   gpu/unpack.sh /work/.device/<files_at> [campaigns/state/paper_table]
set -euo pipefail
FILES=${1:?the folder with state.tar.part* pieces}
STATE=${2:-campaigns/state/paper_table}
ls "$FILES"/state.tar.part* >/dev/null
NEW="$STATE.new.$$"
mkdir -p "$NEW"
cat "$FILES"/state.tar.part* | tar -x -C "$NEW"
rm -rf "$STATE"
mv "$NEW" "$STATE"
echo "unpacked into $STATE ($(du -sk "$STATE" | cut -f1) KiB)"
cat "$STATE/results.md" 2>/dev/null || true
# The device tool carries at most 64 MiB: the tree that travels (tracked and untracked files git
# does not ignore) and the carried bundle. Said now, so that a state grown too big is mended
# here, not found by a refused call in a rare lease.
if git rev-parse --git-dir >/dev/null 2>&1; then
    # best-effort: no bundle here (a fresh clone), or a file gone, is counted as nothing
    TREE=$(git ls-files -co --exclude-standard -z | xargs -0 du -cb 2>/dev/null | tail -1 \
        | cut -f1 || true)
    BUNDLE=$(du -sb gpu/bundle 2>/dev/null | cut -f1 || true)
    MIB=$(( (${TREE:-0} + ${BUNDLE:-0}) / 1048576 ))
    echo "the next call carries about ${MIB} MiB of the tool's 64 (the tree and gpu/bundle)"
    [ "$MIB" -le 60 ] || echo "WARNING: too close to 64 MiB: drop the compile cache" \
        "($STATE/compile-cache) or older files before the next lease" >&2
fi
