# kvldp — two entry points: `make demo` (the main job) and `make test` (the whole suite).
# Both build .venv from nothing; every other target is a convenience.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
EXTRAS ?= dev,broker

.PHONY: demo test lint typecheck unit venv clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "kvldp needs Python >= 3.11")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS)]'
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/kvldp demo

lint: $(STAMP)
	$(BIN)/ruff check common producer aggregator kvldp tests
	$(BIN)/ruff format --check common producer aggregator kvldp tests

typecheck: $(STAMP)
	$(BIN)/mypy common aggregator producer kvldp

unit: $(STAMP)
	$(BIN)/pytest -q

test: lint typecheck unit

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
