# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: install system-packages run test unit e2e bench lint clean down

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

# Debian packages a real node's build needs (runc links libseccomp): installed when missing, as root; anyone else
# is told the command (real nodes need root anyway). Not Debian: nothing to do here, the build names what it lacks.
SYSTEM_PACKAGES := libseccomp-dev pkg-config

system-packages:
	@command -v dpkg >/dev/null || exit 0; \
	missing=$$(for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	[ -z "$$missing" ] && exit 0; \
	if [ "$$(id -u)" != 0 ]; then echo "real nodes need: sudo apt-get install $$missing" >&2; exit 0; fi; \
	apt-get install -y -q --no-install-recommends $$missing || { apt-get update -q && apt-get install -y -q --no-install-recommends $$missing; }

# Set up, start the local cluster (built from Go modules on first use, cached in ~/.cache/wf),
# submit the example jobs and watch them to the end, then show where each step ran. Two nodes per node group:
# the multi-node example trains on two DL1 nodes at once. One real node, where tiny-train's program really runs;
# where one cannot run (`up` exits 3 naming what is missing: not root, no cgroups...), the cluster starts without.
run: install system-packages
	wf lint examples/ workflows/ eksctl/
	wf cluster up --queues --nodes-per-group 2 --real-nodes 1 || { test $$? = 3 && \
		echo "no real node here: every example is simulated" && wf cluster up --queues --nodes-per-group 2; }
	wf submit examples/ --watch
	wf list --all-namespaces

# Static checks (configured in pyproject.toml): ruff's lint rules; the layers' import contracts (import-linter:
# only downwards, no cycles, no client in the pure layers); mypy, strict on the pure layers.
lint: install
	$(PY) -m ruff check src tests benchmarks
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m mypy

# The slowest tests' times end the run, so every CI log shows where its minutes went. Two pytest-xdist workers:
# the end-to-end tests mostly wait on their clusters, so two at once nearly halve the suite on 2 cores. Each e2e
# file stays on one worker (tests/conftest.py), in the order collected: the unit tests, then the files on the
# default components, then those on optional ones, which the background build makes meanwhile.
PYTEST_WORKERS := -n 2 --dist loadfile --no-loadscope-reorder

test: lint system-packages
	$(PY) -m pytest -q --durations=30 $(PYTEST_WORKERS) tests

unit: install
	$(PY) -m pytest -q $(PYTEST_WORKERS) tests --ignore=tests/e2e

e2e: install system-packages
	$(PY) -m pytest -q --durations=30 $(PYTEST_WORKERS) tests/e2e

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
