# Everything runs inside .venv, made on first use; torch comes from constraints.txt (CPU build).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip install -c constraints.txt

.PHONY: venv test lint bench clean

$(BIN)/activate: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) -e '.[dev]'
	touch $(BIN)/activate

venv: $(BIN)/activate

lint: venv
	$(BIN)/ruff check .

test: lint
	OMP_NUM_THREADS=2 $(BIN)/pytest -q

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
