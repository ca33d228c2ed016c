# Two commands do everything on a fresh machine with Python 3.11:
#   make run   - set up .venv, then run the whole chain on the embedded default (offline)
#   make test  - set up .venv, then run the test suite
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export KEDRO_DISABLE_TELEMETRY := 1
export MLFLOW_ENABLE_TELEMETRY := false
export DO_NOT_TRACK := 1

.PHONY: run test lint viz viz-serve reference docs mlflow services services-stop clean-data

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/kedro run

# Three workers on two cores: the tests that mostly wait on processes of their own (SLURM jobs,
# sweep workers; marked `waits`) leave a worker idle, and a third keeps both cores busy meanwhile
# (measured 2026-12-07 on a 2-core Xeon: 498 s and 556 s, against 576 s and 630 s with two).
test: $(STAMP)
	$(BIN)/python -m pytest -n 3 --dist worksteal tests

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/ruff format --check src tests benchmarks tools
	$(BIN)/lint-imports
	$(BIN)/mypy src/seq2final tools

viz: $(STAMP)
	$(BIN)/kedro viz build

# kedro-viz served and opened on the six pipelines' steps (kedro viz run opens all of __default__ at 30 %)
VIZ_PORT ?= 4141
viz-serve: $(STAMP)
	$(BIN)/python tools/viz_serve.py --port $(VIZ_PORT)

# docs/reference.md, generated from the registries (tests/test_docs.py keeps it current)
reference: $(STAMP)
	$(BIN)/python tools/docgen.py > docs/reference.md

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The MLflow UI on the project's database: one worker and no job runner (~0.5 GB instead of ~2.6).
mlflow: $(STAMP)
	@echo "MLflow UI: http://127.0.0.1:5000/#/experiments?workflowType=machine_learning"
	MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false $(BIN)/mlflow ui --backend-store-uri sqlite:///mlflow.db \
		--workers 1 --host 127.0.0.1 --port 5000

# A laptop "cluster"'s shared services: PostgreSQL (Optuna, MLflow) and an MLflow server on it.
services: $(STAMP)
	$(BIN)/kedro services start

services-stop: $(STAMP)
	$(BIN)/kedro services stop

clean-data:
	find data -type f ! -name .gitkeep -delete
