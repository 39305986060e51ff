# perfsched developer entry points. `make demo` and `make test` work on a fresh machine:
# they install what they need (Python venv in a cache outside the repo, Debian packages,
# Go-built Kubernetes binaries) and reuse the cache on later runs.
SHELL := /bin/bash
.ONESHELL:
.SHELLFLAGS := -euo pipefail -c

CACHE      ?= $(HOME)/.cache/perfsched
PY_VERSION := $(shell python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
# The lock (uv.lock) keys the venv: a venv holds exactly one lock's packages, and a changed lock gets a new one.
LOCK_HASH  := $(shell sha256sum uv.lock | cut -c1-12)
VENV       ?= $(CACHE)/venv-py$(PY_VERSION)-$(LOCK_HASH)
# uv installs the venv; its own version is the one uv.lock pins (it is in the dev extra).
UV_VERSION := $(shell awk '/^name = "uv"$$/ {getline; gsub(/"/, "", $$3); print $$3; exit}' uv.lock)
PY         := $(VENV)/bin/python
export PATH := $(VENV)/bin:$(PATH)
# The venv is shared by every clone of the repo (CI clones, worktrees); this clone's code always wins
# over whichever clone the venv's editable install last pointed at.
export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))

.PHONY: help venv deps lock tools tools-e2e test unit lint typecheck importlint fmt demo bench e2e-up e2e-down e2e-matrix clean trainer-image

help:
	@echo "make demo    - bring up a local control plane and run a TrainingJob workload through perfsched"
	@echo "make test    - install everything needed, then lint, type-check, import contracts and pytest"
	@echo "make lint    - ruff + mypy + import-linter only"
	@echo "make lock    - re-resolve uv.lock within pyproject's ranges (LOCK_UPGRADE='pkg ...' bumps only those)"
	@echo "make bench   - run the benchmarks under bench/ and print their figures"
	@echo "make e2e-up / e2e-down - start / stop the local control plane"
	@echo "make e2e-matrix        - e2e scheduling tests on E2E_K8S (v1.37.2) with E2E_GPU_API (dra)"
	@echo "make trainer-image - build the example trainer image (TRAINER_IMAGE=$(TRAINER_IMAGE))"

# The venv lives outside the repo, keyed by uv.lock's hash, so CI clones reuse it. It is installed from the
# lock and nothing else: the lock is checked against pyproject.toml first (one line per conflict), then
# `uv sync --locked` installs exactly the locked versions (and removes anything else), so a release on the
# package index never changes a fresh machine's environment. `make lock` is the only step that resolves.
# The path holds the lock's hash, so a built venv (its stamp present) is this lock's: a fresh clone, whose
# uv.lock is newer than the stamp, reuses it instead of rebuilding (hence no timestamp prerequisite).
$(VENV)/.installed:
	rm -rf "$(VENV)"
	python3 -m venv "$(VENV)"
	"$(PY)" -m pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"
	"$(PY)" deploy/lock.py check
	UV_PROJECT_ENVIRONMENT="$(VENV)" "$(VENV)/bin/uv" sync --locked --extra dev --no-install-project --compile-bytecode --quiet \
	  || { echo "make venv: installing uv.lock failed (see above); if uv.lock is stale, run 'make lock'" >&2; exit 1; }
	touch "$@"

venv: $(VENV)/.installed
	# the package itself is always re-installed (the clone path may differ between runs); this also
	# builds perfmodel's compiled tree walk (perfmodel/_forest.c) and the scheduling core's modules that
	# setup.py compiles with mypyc (about 40 s of CPU) where a C compiler is available
	"$(PY)" -m pip install --quiet --no-deps --no-build-isolation -e . >/dev/null
	"$(PY)" -c 'import perfmodel._forest' 2>/dev/null || echo "WARNING: perfmodel._forest was not built \
	(needs a C compiler and the Python headers; Debian: gcc python3-dev): the predictor walks its trees \
	with numpy, about 2x slower, and tests/perfmodel/test_forest_native.py fails" >&2
	"$(PY)" -c 'import scheduler.sim.engine as m; assert m.__file__.endswith(".so")' 2>/dev/null \
	|| echo "WARNING: the scheduling core was not compiled with mypyc (setup.py's NATIVE; needs mypy and a \
	C compiler): it runs as Python, the simulator's rounds about 2x slower, and tests/sim/test_native.py fails" >&2

# Re-resolve the lock (the only target that asks the package index what is newest), then export the image's
# pin list. `make lock LOCK_UPGRADE="httpx uvicorn"` upgrades just those packages (a Dependabot-style bump).
LOCK_UPGRADE ?=
lock:
	if [ ! -x "$(VENV)/bin/uv" ]; then python3 -m venv "$(CACHE)/uv-$(UV_VERSION)" \
	  && "$(CACHE)/uv-$(UV_VERSION)/bin/pip" install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"; fi
	uvbin="$(VENV)/bin/uv"; [ -x "$$uvbin" ] || uvbin="$(CACHE)/uv-$(UV_VERSION)/bin/uv"
	PATH="$$(dirname "$$uvbin"):$$PATH" python3 deploy/lock.py update $(LOCK_UPGRADE)

# Debian packages and Go-built binaries for the e2e control plane (cached by version). The tests also need
# the JobSet and Kubeflow Trainer controllers (e2e/test_job_kinds.py runs them for real); the demo does not.
tools: venv
	bash e2e/install-tools.sh

tools-e2e: venv
	PERFSCHED_WITH_JOBSETS=1 bash e2e/install-tools.sh

lint: venv
	ruff check scheduler perfmodel perfsched_dev tests e2e bench deploy
	ruff format --check scheduler perfmodel perfsched_dev tests e2e bench deploy
	mypy
	mypy e2e deploy
	lint-imports

fmt: venv
	ruff format scheduler perfmodel perfsched_dev tests e2e bench deploy
	ruff check --fix scheduler perfmodel perfsched_dev tests e2e bench deploy

unit: venv
	pytest tests -q

# All tests, then the DRA e2e and the extender's scheduling e2e again on a cluster whose GPU pools are half
# device-plugin, half DRA (ResourceSlices), so both GPU APIs run against the real control plane; and the
# gangs under the Workload API (GenericWorkload gate), which the default cluster leaves off.
test: venv tools-e2e lint
	pytest -q
	PERFSCHED_E2E_GPU_API=mixed pytest -q e2e/test_dra.py e2e/test_extender.py e2e/test_extender_bind.py e2e/test_extender_plan_check.py
	PERFSCHED_E2E_WORKLOAD_API=1 pytest -q e2e/test_workload_api.py

# demo, dev-cluster and emulate are the developer tooling's commands (perfsched_dev/, registered through
# pyproject.toml's perfsched.commands entry points, which `venv` refreshes by re-installing the package)
demo: venv tools
	perfsched demo $(DEMO_ARGS)

bench: venv
	for b in bench/*.py; do echo "== $$b"; python "$$b"; done

e2e-up: venv tools
	perfsched dev-cluster up $(UP_ARGS)

e2e-down: venv
	perfsched dev-cluster down

# The e2e scheduling tests on another Kubernetes version or GPU API (docs/dra.md):
#   make e2e-matrix E2E_K8S=v1.35.4 E2E_GPU_API=device-plugin
E2E_K8S ?= v1.37.2
E2E_GPU_API ?= dra
E2E_TESTS ?= e2e/test_dra.py e2e/test_extender.py e2e/test_extender_bind.py e2e/test_extender_plan_check.py e2e/test_operator.py
e2e-matrix: venv
	PERFSCHED_K8S_VERSION=$(E2E_K8S) bash e2e/install-tools.sh
	PERFSCHED_K8S_VERSION=$(E2E_K8S) PERFSCHED_E2E_GPU_API=$(E2E_GPU_API) pytest -q $(E2E_TESTS)

# The example trainer (examples/trainer): the image crds/examples/ run. Push it where your cluster pulls from:
#   make trainer-image TRAINER_IMAGE=<registry>/perfsched-trainer:0.1 && docker push <registry>/perfsched-trainer:0.1
TRAINER_IMAGE ?= registry.example.com/perfsched-trainer:0.1
trainer-image:
	docker build -f examples/trainer/Dockerfile -t "$(TRAINER_IMAGE)" $(TRAINER_BUILD_ARGS) .

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache build *.egg-info
