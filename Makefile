# warmstart: `make demo` runs the main job, `make test` passes the tests. Both do all set-up.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export JSII_RUNTIME_PACKAGE_CACHE_ROOT := $(CURDIR)/.cache/jsii
export CDK_HOME := $(CURDIR)/.cache/cdk
export CDK_DISABLE_CLI_TELEMETRY := true
export ORT_DISABLE_TELEMETRY := 1
export MPLCONFIGDIR := $(CURDIR)/.cache/matplotlib
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: setup demo test synth bench lint clean

setup: $(VENV)/.installed node_modules/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

synth: setup
	npx cdk synth --quiet

demo: setup
	$(PY) -m infra.cli demo

test: setup
	$(PY) -m pytest

bench: setup
	$(PY) -m bench

lint: setup
	$(VENV)/bin/ruff check functions warmers infra tests bench

clean:
	rm -rf cdk.out .cache .pytest_cache
