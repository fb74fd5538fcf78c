# Everything runs inside .venv, made on first use; torch comes from constraints.txt (CPU build).
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip install -c constraints.txt
# Offline data: $GRAPHORMER_SEPNORM_DATA_MIRROR if set; else mirror/, built from ../shared/data
# when that exists beside the checkout; else the official downloads.
SHARED_DATA ?= ../shared/data
export GRAPHORMER_SEPNORM_DATA_MIRROR ?= $(if $(wildcard $(SHARED_DATA)/ogbg_molhiv),$(CURDIR)/mirror)
DEMO := runs/demo
CLI := $(BIN)/graphormer-sepnorm
DEMO_ARGS := --config configs/molhiv.yaml --config configs/presets/cpu_10min.yaml \
	--trainer.logger.init_args.name demo --trainer.enable_progress_bar false

.PHONY: venv test lint docs demo mirror bench clean gpu-bundle image-twin image-rehearsal wheel-check

$(BIN)/activate: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) -e '.[dev,docs]'
	touch $(BIN)/activate

venv: $(BIN)/activate

lint: venv
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache

# The documentation site (docs/): offline, every warning an error, every cross-reference and link
# between pages checked (-n); about half a minute.
docs: venv
	$(BIN)/sphinx-build -W --keep-going -n -q -b html docs docs/_build/html

# The notebooks read MolHIV and ZINC-subset from the data root, through the mirror when set.
LOCAL_MIRROR := $(if $(filter $(CURDIR)/mirror,$(GRAPHORMER_SEPNORM_DATA_MIRROR)),mirror)

# The CPU wing's C kernels must build here (gcc and AVX2): tests/nn/cpu/test_native_build.py
# fails otherwise, so the tests run them instead of the plain torch fallback.
test: lint docs $(LOCAL_MIRROR) wheel-check
	OMP_NUM_THREADS=2 $(BIN)/pytest -q tests --nbmake notebooks

# The wheel as a pip user gets it (.ci/wheel_check.sh): built, installed into a fresh venv
# outside the checkout (dependencies from the package index), then a tiny fit --config
# smiles_csv and a prediction there; about 2.5 minutes.
wheel-check: venv
	bash .ci/wheel_check.sh $(BIN)/python $${TMPDIR:-/tmp}/graphormer-sepnorm-wheel-check

# Copies MolHIV into mirror/ and writes PyG's ZINC raw files there (about 2.5 minutes), once.
mirror: mirror/ogbg_molhiv/RELEASE_v1.txt mirror/ZINC/raw/test.pickle

mirror/ogbg_molhiv/RELEASE_v1.txt:
	mkdir -p mirror/ogbg_molhiv
	cp -r $(SHARED_DATA)/ogbg_molhiv/. mirror/ogbg_molhiv/
	chmod -R u+w mirror/ogbg_molhiv

mirror/ZINC/raw/test.pickle: | $(BIN)/activate
	$(BIN)/python $(SHARED_DATA)/ZINC/build_raw.py mirror/ZINC

# Trains Graphormer+SepNorm on MolHIV for about 10 minutes on the CPU, tests the best checkpoint
# (validation ROC-AUC), prints its test ROC-AUC, and predicts examples/molecules.smi with it.
demo: venv $(if $(filter $(CURDIR)/mirror,$(GRAPHORMER_SEPNORM_DATA_MIRROR)),mirror/ogbg_molhiv/RELEASE_v1.txt)
	rm -rf $(DEMO)
	$(CLI) fit $(DEMO_ARGS) --trainer.logger.init_args.save_dir runs --trainer.logger.init_args.version fit
	$(CLI) test $(DEMO_ARGS) --trainer.logger.init_args.save_dir runs --trainer.logger.init_args.version test \
		--ckpt_path "$$(ls $(DEMO)/fit/checkpoints/best-*.ckpt | head -1)" 2>&1 | tee $(DEMO)/test.log
	$(BIN)/graphormer-sepnorm-predict examples/molecules.smi --no-progress --overwrite \
		--checkpoint "$$(ls $(DEMO)/fit/checkpoints/best-*.ckpt | head -1)" -o $(DEMO)/molecules_preds.csv
	@$(BIN)/python -c "import pandas as p; print(p.read_csv('$(DEMO)/molecules_preds.csv', \
		keep_default_na=False).to_string(index=False, max_colwidth=45))"
	@echo "demo: test ROC-AUC of the best checkpoint: $$(grep -o 'test/roc_auc *[0-9.]*' $(DEMO)/test.log | awk '{print $$2}')"

# What a lent GPU machine lacks, into gpu/bundle/ (git-ignored; carried with the tree): the
# wheels of jsonargparse & co. for Python 3.12 and the prepared splits of MolHIV, ZINC-subset and
# ZINC (about 3.5 minutes with the mirror; 15 MB). gpu/run.sh uses it; see docs/tutorials/scaling_out.md.
gpu-bundle: venv $(if $(LOCAL_MIRROR),mirror)
	bash gpu/bundle.sh $(BIN)/python

# A twin of the lent GPU's Python, as the device tool lists its image: Python 3.12, torch 2.11.0,
# lightning 2.6.6, torch-geometric 2.8.0.post1, torchmetrics 1.9.0, numpy 2.5.2, pytest,
# networkx; no RDKit, ogb or jsonargparse. About 5 GB from PyPI (torch's CUDA build, which runs on
# the CPU), outside the checkout. `make image-rehearsal` runs gpu/run.sh twice in it on the CPU
# (gpu/rehearse.sh): the smoke check's tests, then the paper's table stopped by its time and
# continued by the second call. Not part of `make test` (CI has no internet).
TWIN ?= ../image-twin
PYTHON312 ?= $(shell command -v python3.12)
$(TWIN)/bin/python:
	$(PYTHON312) -m venv $(TWIN)
	$(TWIN)/bin/pip install -q torch==2.11.0 torch-geometric==2.8.0.post1 lightning==2.6.6 \
		torchmetrics==1.9.0 numpy==2.5.2 pyyaml pytest networkx

image-twin: $(TWIN)/bin/python

image-rehearsal: image-twin $(if $(wildcard gpu/bundle/data),,gpu-bundle)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} bash gpu/rehearse.sh $(abspath $(TWIN))/bin/python \
		$(abspath $(TWIN))/rehearsal

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
