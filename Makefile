# nimbix-burst: every setup step lives here, so a fresh clone needs only `make demo` / `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEV_DIR := .dev
# Control-plane binaries are cached outside the checkout (keyed by k8s version, Go version, go.sum).
export NIMBIX_BURST_CACHE ?= $(HOME)/.cache/nimbix-burst
export NO_PROXY := 127.0.0.1,localhost
export no_proxy := 127.0.0.1,localhost
unexport http_proxy https_proxy HTTP_PROXY HTTPS_PROXY

.PHONY: help venv lock controlplane node certmanager helm promtool lint unit e2e test test-order dev-up dev-down demo bench replay clean

help:
	@echo "make demo      run the whole thing on an embedded local control plane"
	@echo "make test      set everything up, lint, and run unit + integration (random order) + e2e tests"
	@echo "make test-order  unit + integration in two random orders, then each e2e module alone"
	@echo "make dev-up    start control plane + real node + webhook + JARVICE emulator in the background (.dev/)"
	@echo "                (INSTALL=helm: install the add-on with the Helm chart; links .dev/helm)"
	@echo "make dev-down  stop everything dev-up started"
	@echo "make bench     admission benchmarks (bench/results.json, bench/results.png)"
	@echo "make lock      constraints.txt anew from the newest versions pyproject.toml allows"
	@echo "make replay    what-if replay of the Alibaba GPU trace through the real stack"

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test]'
	touch $@

# constraints.txt anew: the newest versions pyproject.toml allows, resolved in a throwaway venv (its
# comment lines kept). Run `make test` before committing the result.
lock:
	rm -rf .lock-venv
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet --upgrade pip
	.lock-venv/bin/pip install --quiet -e '.[test]'
	{ grep '^#' constraints.txt; .lock-venv/bin/pip freeze --exclude-editable | grep -v '^pip=='; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf .lock-venv
	@echo "constraints.txt: $$(grep -vc '^#' constraints.txt) packages pinned; run make test before committing it"

controlplane:
	@devplatform/cluster/build-controlplane.sh >/dev/null

# What the real node needs besides the binaries: containerd, runc, CNI plugins, buildah, iptables
# (Debian packages, as root) and the project's images as OCI archives.
node: controlplane
	@devplatform/host/install-packages.sh
	@devplatform/images/build.sh >/dev/null

# cert-manager's controller and cainjector, built from its Go module (cached like the control plane).
certmanager:
	@devplatform/certmanager/build.sh >/dev/null

# helm, built from its Go module (devplatform/gotools/helm/go.mod pins the version; cached like
# cert-manager, keyed by version, Go version and the wrapper's go.sum).
helm:
	@devplatform/gotools/build.sh helm >/dev/null

# promtool, taken from Debian's prometheus package (extracted, not installed; cached by the
# package's version).
promtool:
	@devplatform/debtools/fetch.sh promtool >/dev/null

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# Unit and integration tests run in a random order (pytest-randomly): the seed is printed first, and
# SEED=<n> repeats an order. The e2e tier runs in file order (one control plane and real node for the
# session); each of its modules passes alone (make test-order).
# Coverage is measured as they run (the packages: pyproject.toml's [tool.coverage.run]); what each
# package's lines the tests ran is printed after them.
# They run in TEST_WORKERS processes (pytest-xdist; each worker takes the tests in the seed's order): most of
# their time is waiting on the processes and sockets they start, not CPU.
TEST_WORKERS ?= 3
# PYTHONNODEBUGRANGES: tracebacks without column ranges. Python 3.11's traceback module parses each line
# (ast) to underline a range, and its AST state is shared by threads: a server thread of a test logging an
# exception while pytest parsed a failing test's source raised "AST constructor recursion depth
# mismatch" inside pytest, which ended the whole tier at that failure.
RANDOM_ORDER = mkdir -p .test-runs; seed=$${SEED:-$$RANDOM}; echo "unit + integration in random order: seed $$seed (SEED=$$seed repeats it)"; \
	PYTHONNODEBUGRANGES=1 $(BIN)/pytest tests/unit tests/integration -q -p randomly -p no:cacheprovider --randomly-seed=$$seed \
		-n $(TEST_WORKERS) --cov --cov-report= && { $(COVERAGE_BY_PACKAGE); }
COVERAGE_BY_PACKAGE = echo "unit + integration coverage, per package (lines the tests ran):"; \
	$(BIN)/coverage report | awk '$$1 ~ /\.py$$/ { split($$1, part, "/"); lines[part[1]] += $$2; missed[part[1]] += $$3 } \
		END { for (p in lines) printf "  %-15s %5.1f %% of %d lines\n", p, 100 * (lines[p] - missed[p]) / lines[p], lines[p] }' \
		| sort

unit: venv helm promtool
	@$(RANDOM_ORDER)

e2e: venv controlplane certmanager helm
	$(BIN)/pytest tests/e2e -q -p no:randomly

# The e2e tier mostly waits (for pods, jobs, deadlines): it runs as E2E_SHARDS sessions side by side, each
# with its own control plane and real node in namespaces of its own (devplatform/testshards), and lint and
# the unit + integration tiers run beside them, their output kept and printed after. Any failing fails the
# target. The images are built first (`node`): a shard has no network.
E2E_SHARDS ?= 4
# More pytest arguments for every shard, e.g. E2E_ARGS=--durations=0 to measure the modules for the plan.
E2E_ARGS ?=
FAST_TIERS_LOG := .test-runs/lint-unit-integration.log
# $(1): what runs beside the e2e sessions (output kept in FAST_TIERS_LOG, printed after theirs); $(2): the
# launcher's options; $(3): the target's name. Either failing fails the target.
define E2E_WITH_FAST_TIERS
mkdir -p $(dir $(FAST_TIERS_LOG)); \
echo "lint / unit + integration run beside the e2e tier; their output follows it ($(FAST_TIERS_LOG))"; \
( $(1) ) > $(FAST_TIERS_LOG) 2>&1 & fast=$$!; \
e2e=0; $(BIN)/python -m devplatform.testshards $(2) -- -q -p no:randomly -p no:cacheprovider $(E2E_ARGS) \
	|| e2e=$$?; \
lint_unit=0; wait $$fast || lint_unit=$$?; \
echo "== lint / unit + integration (ran beside the e2e tier)"; cat $(FAST_TIERS_LOG); \
if [ $$lint_unit -ne 0 ] || [ $$e2e -ne 0 ]; then \
	echo "make $(3): FAILED (lint/unit+integration exit $$lint_unit, e2e exit $$e2e)"; exit 1; fi; \
echo "make $(3): all tiers passed"
endef

test: venv node certmanager helm promtool
	@$(call E2E_WITH_FAST_TIERS,$(MAKE) --no-print-directory lint && { $(RANDOM_ORDER); },--shards $(E2E_SHARDS),test)

# Order independence: unit + integration in two random orders, then every e2e module alone in a session
# of its own (a control plane and a real node each), E2E_SHARDS of them side by side; the random orders
# run beside them.
test-order: venv node certmanager helm promtool
	@$(call E2E_WITH_FAST_TIERS,for run in 1 2; do $(RANDOM_ORDER); done,--alone --shards $(E2E_SHARDS),test-order)

# INSTALL=kustomize (the default: kubectl apply -k devplatform/overlay) or INSTALL=helm (the chart).
INSTALL ?= kustomize
dev-up: venv controlplane certmanager $(if $(filter helm,$(INSTALL)),helm)
	$(BIN)/python -m devplatform.cluster up --dir $(DEV_DIR) --install $(INSTALL)

# Also undoes what killed e2e launcher runs left (their processes, cgroups, mount points, the host's
# sysctls), by their records in /run/nimbix-burst/testshards.
dev-down: venv
	$(BIN)/python -m devplatform.cluster down --dir $(DEV_DIR)
	$(BIN)/python -m devplatform.testshards --clean-stale

demo: venv controlplane
	$(BIN)/python -m devplatform.demo

bench: venv controlplane
	@devplatform/host/install-packages.sh bench
	$(BIN)/python -m bench

# make replay BURST_AFTER=0,5m,30m: the webhook once per burst-after setting; MAX_COST_PER_HOUR=none,20: and
# per cost cap; REPLAY_ARGS: any other option.
replay: venv controlplane
	$(BIN)/python -m replay $(if $(BURST_AFTER),--burst-after $(BURST_AFTER)) \
		$(if $(MAX_COST_PER_HOUR),--max-cost-per-hour $(MAX_COST_PER_HOUR)) $(REPLAY_ARGS)

# The stale-run cleanup needs only the standard library: it runs before .venv goes.
clean:
	$(PYTHON) -m devplatform.testshards --clean-stale
	rm -rf $(VENV) $(DEV_DIR) .test-runs .mypy_cache .ruff_cache .pytest_cache
