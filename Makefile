# One command per habit, the same for people and CI.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test lint typecheck pytest bench chaos demo install clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[web,postgres,otel,django,dev]'
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
	$(BIN)/python -m pip install --quiet -e '.[web,postgres,otel,django,dev,bench]'
	$(BIN)/python bench/run_all.py

# Worker processes killed, frozen and locked out at random, on SQLite then PostgreSQL,
# then PostgreSQL again with only faults every worker lives through (its connections
# ended; a kill or restart would hide a wake-up lost to them) (docs/reliability.md).
# Not part of `make test`. CHAOS_ARGS="--seed 2 --duration 30".
chaos: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[web,postgres,otel,django,dev,bench]'
	rc=0; \
	$(BIN)/python bench/chaos.py --backend sqlite $(CHAOS_ARGS) || rc=1; \
	$(BIN)/python bench/chaos.py --backend postgres $(CHAOS_ARGS) || rc=1; \
	$(BIN)/python bench/chaos.py --backend postgres --kills 0 --stops 0 --locks 0 \
		--terminates 10 $(CHAOS_ARGS) || rc=1; \
	exit $$rc

# The demo needs only the dashboard's extra, not the dev tools: a stamp of its own.
DEMO_STAMP := $(VENV)/.installed-web

$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[web]'
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/jobledger --db demo.db demo

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
