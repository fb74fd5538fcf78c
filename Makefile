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

.PHONY: venv test lint demo mirror bench clean

$(BIN)/activate: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) -e '.[dev]'
	touch $(BIN)/activate

venv: $(BIN)/activate

lint: venv
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache

# The notebooks read MolHIV and ZINC-subset from the data root, through the mirror when set.
LOCAL_MIRROR := $(if $(filter $(CURDIR)/mirror,$(GRAPHORMER_SEPNORM_DATA_MIRROR)),mirror)

# GRAPHORMER_SEPNORM_NATIVE=require: the C kernels must build (gcc is on every machine of this
# project, CI's included), so the tests run them instead of silently falling back.
test: lint $(LOCAL_MIRROR)
	OMP_NUM_THREADS=2 GRAPHORMER_SEPNORM_NATIVE=require $(BIN)/pytest -q tests --nbmake notebooks

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

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
