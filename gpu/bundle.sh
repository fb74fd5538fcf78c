#!/usr/bin/env bash
# What a lent GPU machine lacks, into gpu/bundle/ (git-ignored; carried with the tree): the wheels
# of the CLI's parser, jsonargparse[signatures] (this environment's versions, for CPython 3.12 on
# x86-64), and the prepared splits of MolHIV, ZINC-subset and ZINC, since the image has neither
# RDKit nor ogb to featurize them (graphormer_sepnorm.datasets.prepared).
#
#   gpu/bundle.sh [PYTHON]        (make gpu-bundle; PYTHON defaults to .venv/bin/python)
set -euo pipefail
PY=${1:-.venv/bin/python}
BUNDLE=gpu/bundle
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/wheels" "$BUNDLE/data"
PINS=$("$PY" -c 'import importlib.metadata as m
print(" ".join(f"{p}=={m.version(p)}" for p in ("jsonargparse", "docstring-parser",
                                                "typeshed-client")))')
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
    -d "$BUNDLE/wheels" $PINS
for dataset in molhiv zinc_subset zinc; do
    OMP_NUM_THREADS=1 "$PY" -m graphormer_sepnorm.datasets.prepared "$dataset" \
        "$BUNDLE/data/$dataset" --root "${DATA_ROOT:-data}"
done
ls "$BUNDLE/wheels"
du -sh "$BUNDLE/wheels" "$BUNDLE/data"
du -sh "$BUNDLE"
