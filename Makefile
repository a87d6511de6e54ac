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

.PHONY: help venv controlplane certmanager helm promtool lint unit e2e test dev-up dev-down demo bench replay clean

help:
	@echo "make demo      run the whole thing on an embedded local control plane"
	@echo "make test      set everything up, lint, and run unit + integration + e2e tests"
	@echo "make dev-up    start control plane + real node + webhook + JARVICE emulator in the background (.dev/)"
	@echo "                (INSTALL=helm: install the add-on with the Helm chart; links .dev/helm)"
	@echo "make dev-down  stop everything dev-up started"
	@echo "make bench     admission benchmarks (bench/results.json, bench/results.png)"
	@echo "make replay    what-if replay of the Alibaba GPU trace through the real stack"

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

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

# helm and promtool, built from their Go modules (devplatform/gotools/<tool>/go.mod pins the
# version; cached like cert-manager, keyed by version, Go version and the wrapper's go.sum).
helm:
	@devplatform/gotools/build.sh helm >/dev/null

promtool:
	@devplatform/gotools/build.sh promtool >/dev/null

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: venv helm promtool
	$(BIN)/pytest tests/unit tests/integration -q

e2e: venv controlplane certmanager helm
	$(BIN)/pytest tests/e2e -q

test: venv controlplane certmanager helm promtool lint
	$(BIN)/pytest -q

# INSTALL=kustomize (the default: kubectl apply -k devplatform/overlay) or INSTALL=helm (the chart).
INSTALL ?= kustomize
dev-up: venv controlplane certmanager $(if $(filter helm,$(INSTALL)),helm)
	$(BIN)/python -m devplatform.cluster up --dir $(DEV_DIR) --install $(INSTALL)

dev-down: venv
	$(BIN)/python -m devplatform.cluster down --dir $(DEV_DIR)

demo: venv controlplane
	$(BIN)/python -m devplatform.demo

bench: venv controlplane
	$(BIN)/python -m bench

# make replay BURST_AFTER=0,5m,30m: the webhook once per burst-after setting; REPLAY_ARGS: any other option.
replay: venv controlplane
	$(BIN)/python -m replay $(if $(BURST_AFTER),--burst-after $(BURST_AFTER)) $(REPLAY_ARGS)

clean:
	rm -rf $(VENV) $(DEV_DIR) .test-runs .mypy_cache .ruff_cache .pytest_cache
