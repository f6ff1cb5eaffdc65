# One command per habit, the same for people and CI.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test lint typecheck pytest bench demo install clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[web,postgres,dev]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy --strict src tests

pytest: $(STAMP)
	$(BIN)/pytest -m "not slow" $(PYTEST_ARGS)

test: lint typecheck pytest

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[web,postgres,dev,bench]'
	$(BIN)/python bench/run_all.py

demo: $(STAMP)
	$(BIN)/jobledger --db demo.db demo

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
