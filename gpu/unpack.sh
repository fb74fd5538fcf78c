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
