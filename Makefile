# The two set-up commands: `make demo` and `make test`. Everything they need is installed here.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Runtime extras for the main job; the test suite adds the dev tools.
DEMO_STAMP := $(VENV)/.installed-demo
TEST_STAMP := $(VENV)/.installed-test
PYTEST_ARGS ?=
FORECAST_VENV := .venv-forecast
FORECAST_STAMP := $(FORECAST_VENV)/.installed
MSTL_TESTS := tests/test_predictor_mstl.py

.PHONY: demo test test-setup lab-check lint typecheck unit lab-deps k8s-deps image image-deps clean help

help:
	@echo "make demo   - create .venv, install, run the main job (elastore simulate) on the built-in default trace"
	@echo "make test   - install everything the suites need, then lint, type-check and test the mechanisms (CI)"
	@echo "make lab-check - the lab's measurements (hours): each writes experiments/*/results.json"
	@echo "make image  - build the operator's image here, offline, on a local Debian base (podman; IMAGE=elastore|cassandra|sandbox|all)"

$(VENV)/bin/python:
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "elastore needs Python >= 3.11"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(VENV)/bin/python
	$(BIN)/pip install -q -e .
	@touch $@

$(TEST_STAMP): pyproject.toml | $(VENV)/bin/python
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

demo: $(DEMO_STAMP)
	$(BIN)/elastore simulate

lint: $(TEST_STAMP)
	$(BIN)/ruff check elastore tests benchmarks experiments

typecheck: $(TEST_STAMP)
	$(BIN)/mypy

unit: $(TEST_STAMP)
	$(BIN)/pytest -m "not k8s and not lab" $(PYTEST_ARGS)

# the lab suites need the Cassandra jars (Maven Central, cached by version), Debian's
# Prometheus and stress-ng (the lab's co-runners), Debian's Swift, rsync and memcached (the Swift lab),
# Prometheus's statsd_exporter (built with Go from the module proxy, cached by version), and
# iproute2 and curl (on the machine image already)
lab-deps: $(TEST_STAMP)
	@command -v prometheus >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; }
	@command -v curl >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends curl; }
	@command -v stress-ng >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends stress-ng; }
	@test -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends faketime; }
	@command -v swift-proxy-server >/dev/null && command -v rsync >/dev/null && command -v memcached >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	  swift swift-proxy swift-object swift-container swift-account rsync memcached; }
	$(BIN)/python -c 'from elastore.lab.cassandra.nodes import ensure_jars; print("cassandra jars:", ensure_jars()); from elastore.lab.cassandra.nodes import ensure_exporter_server; print("jmx exporter server:", ensure_exporter_server())'
	$(BIN)/python -c 'from elastore.lab.swift.lab import ensure_statsd_exporter; print("statsd_exporter:", ensure_statsd_exporter())'

# the k8s suites need kube-apiserver, kube-controller-manager, kube-scheduler, etcd and kwok
# (built with the machine's Go from the module proxy, once, cached by version: 10-20 min the
# first time), helm (same), cass-operator's CassandraDatacenter CRD (its module source, same
# proxy) and kubectl (on the machine image)
k8s-deps: $(TEST_STAMP)
	@command -v kubectl >/dev/null || { echo "kubectl is not on PATH: the k8s suites need it" >&2; exit 1; }
	PYTHONPATH=tests $(BIN)/python -c 'from testbed.k8s import ensure_binaries, ensure_helm, cass_operator_crd; \
	  print("kubernetes test binaries:", ensure_binaries(print)); print("helm:", ensure_helm(print)); \
	  print("cass-operator CRD:", cass_operator_crd())'

# the images of the real node (tests/testbed/images.py): podman with runc (crun refuses the
# machine's cgroup v1), debootstrap for the local Debian bases (no registry is reachable),
# containerd and the CNI plugins for the kubelet, buildah's tools, iptables (the real node's
# test reads its NAT table: nothing masqueraded). `make image` builds the
# operator's image from the top-level Dockerfile on a local base, its wheels fetched first
# (every RUN is offline); IMAGE=cassandra|sandbox|all for the others.
IMAGE ?= elastore
IMAGE_PKGS := podman runc debootstrap containerd containernetworking-plugins buildah iptables
image-deps:
	@missing=$$(for p in $(IMAGE_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | \
	  grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	  apt-get install -y -qq --no-install-recommends $$missing; fi

# (the tool needs only the standard library and the checkout: no install into the venv, whose
# pip only fetches the image's wheels)
image: image-deps | $(VENV)/bin/python
	PYTHONPATH=.:tests $(BIN)/python -m testbed.images $(IMAGE)

# Two tiers (docs/testing.md). `make test` (CI) tests mechanisms, asserting only what holds
# at any machine speed: lint, types, the MSTL baseline's tests (in .venv-forecast:
# statsforecast needs pandas < 3, the package runs on pandas 3), then the unit suites and
# the `concurrent` lab tests on 3 pytest-xdist workers, then the lab suites one at a time
# with the control-plane suites beside them (niced, 2 workers). Every phase
# runs; the exit code is the first failure's. It ends with the time of each phase, the 25
# slowest test files and the figures off target (.test-times/summary.json, figures.jsonl).
# Budget: 35 min with warm caches, 50 cold, on 2 cores.
# `make lab-check` runs the measurements (hours): each writes experiments/*/results.json
# and fails on a missed target; LAB_CHECK=name,name runs some of them.
test:
	@start=$$(date +%s); \
	$(MAKE) --no-print-directory test-setup && \
	$(BIN)/python tests/tiers.py test --since $$start -- $(PYTEST_ARGS)

# the real node's images (tests/test_real_node.py, tests/test_image.py): built once, cached
# (~3.3 min from nothing, ~1 min from the cached Debian bases, nothing when podman has them)
test-setup: $(TEST_STAMP) lab-deps k8s-deps image-deps $(FORECAST_STAMP)
	PYTHONPATH=.:tests $(BIN)/python -m testbed.images all

LAB_CHECK ?=
lab-check: test-setup
	$(BIN)/python tests/tiers.py lab-check $(if $(LAB_CHECK),--only $(LAB_CHECK))

$(FORECAST_STAMP): pyproject.toml
	$(PYTHON) -m venv $(FORECAST_VENV)
	$(FORECAST_VENV)/bin/python -m pip install -q --upgrade pip
	$(FORECAST_VENV)/bin/pip install -q -e '.[forecast]' pytest
	@touch $@

clean:
	rm -rf $(VENV) $(FORECAST_VENV) elastore-report .pytest_cache .mypy_cache .ruff_cache .test-times
