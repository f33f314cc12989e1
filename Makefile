# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: install run test unit e2e bench lint clean down

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

# Set up, start the local cluster (built from Go modules on first use, cached in ~/.cache/wf),
# submit the example jobs and watch them to the end, then show where each step ran. Two nodes per node group:
# the multi-node example trains on two DL1 nodes at once.
run: install
	wf lint examples/ workflows/ eksctl/
	wf cluster up --queues --nodes-per-group 2
	wf submit examples/ --watch
	wf list --all-namespaces

# Static checks (configured in pyproject.toml): ruff's lint rules; the layers' import contracts (import-linter:
# only downwards, no cycles, no client in the pure layers); mypy, strict on the pure layers.
lint: install
	$(PY) -m ruff check src tests benchmarks
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m mypy

# The slowest tests' times end the run, so every CI log shows where its minutes went.
test: lint
	$(PY) -m pytest -q --durations=30 tests

unit: install
	$(PY) -m pytest -q tests --ignore=tests/e2e

e2e: install
	$(PY) -m pytest -q tests/e2e

# The benchmarks read a whole command's time and peak memory through GNU time (Debian's `time` package).
bench: install
	@test -x /usr/bin/time || { echo "the benchmarks need GNU time: sudo apt-get install time" >&2; exit 2; }
	$(PY) benchmarks/startup.py
	$(PY) benchmarks/compile.py
	$(PY) benchmarks/commands.py
	$(PY) benchmarks/watch.py

down: install
	wf cluster down

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .hypothesis
