#!/usr/bin/env bash
# The wheel as a pip user gets it: built from this checkout, installed into a fresh virtual
# environment outside it, then a tiny `fit --config smiles_csv` (the bundled recipe and
# pretrained start) and a prediction from a folder that is not the checkout.
# Usage: .ci/wheel_check.sh PYTHON [WORKDIR]   (PYTHON: the project's venv python, for pip wheel)
set -euo pipefail
PYTHON=${1:?the project venv python}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${2:-$(mktemp -d)}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
case "$WORK" in "$ROOT"*) echo "wheel check: $WORK is inside the checkout" >&2; exit 1;; esac
rm -rf "$WORK/dist" "$WORK/venv" "$WORK/run"
"$PYTHON" -m pip wheel -q --no-deps --no-build-isolation -w "$WORK/dist" "$ROOT"
python3 -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install -q -c "$ROOT/constraints.txt" "$WORK"/dist/graphormer_sepnorm-*.whl
mkdir -p "$WORK/run" && cd "$WORK/run"
"$WORK/venv/bin/python" - <<'PY'
import graphormer_sepnorm, pathlib
where = pathlib.Path(graphormer_sepnorm.__file__).resolve()
assert "site-packages" in where.parts, where  # the wheel, not the checkout
from graphormer_sepnorm.recipes import RECIPES
assert {"smiles_csv", "molhiv", "cpu_10min"} <= set(RECIPES)
rows = ["CCO", "CCN", "CCC", "c1ccccc1", "c1ccccc1O", "CC(=O)O", "CCOC", "CN", "CCCl", "OCCO",
        "c1ccncc1", "CC(C)O", "CCCC", "C1CCCCC1", "CC#N", "COC", "NCCO", "CC(N)=O", "c1ccoc1",
        "CCS"]
with open("own.csv", "w") as f:
    f.write("smiles,logS\n" + "".join(f"{s},{i * 0.1 - 1:.2f}\n" for i, s in enumerate(rows)))
PY
"$WORK/venv/bin/graphormer-sepnorm" fit --config smiles_csv --data.path own.csv \
    --data.target_columns '[logS]' --trainer.max_epochs 2 --data.batch_size 8 \
    --trainer.enable_progress_bar false
best=$(ls runs/smiles_csv/version_0/checkpoints/best-*.ckpt | head -1)
printf 'smiles\nCCO\nc1ccccc1N\nnot a smiles\n' > new.csv
"$WORK/venv/bin/graphormer-sepnorm-predict" new.csv --checkpoint "$best" -o new_preds.csv \
    --no-progress
"$WORK/venv/bin/python" - <<'PY'
import csv
rows = list(csv.DictReader(open("new_preds.csv")))
assert [r["smiles"] for r in rows] == ["CCO", "c1ccccc1N", "not a smiles"], rows
assert {"logS", "logS_std", "logS_lo90", "logS_hi90", "error"} <= set(rows[0]), rows[0]
assert rows[0]["error"] == "" and float(rows[0]["logS"]) == float(rows[0]["logS"])
assert rows[2]["error"] and rows[2]["logS"] == ""
print("wheel check: fit --config smiles_csv and predict from the installed wheel: ok")
PY
