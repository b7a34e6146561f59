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
export SAM_CLI_TELEMETRY := 0
# AWS SAM CLI pins its own dependencies (boto3, cfn-lint, ...): it lives in its own venv.
SAM_VENV := .venv-sam
SAM_CLI_VERSION := 1.170.0
SAM := $(SAM_VENV)/bin/sam
TEMPLATE := cdk.out/Warmstart.template.json
EVENT ?= tests/data/events/http_api_v2.json
AGENT ?= intent

.PHONY: setup browser demo test synth cfn-lint sam-validate sam-local-invoke bench lint clean

setup: $(VENV)/.installed node_modules/.installed $(SAM_VENV)/.installed-$(SAM_CLI_VERSION) browser

# Headless Chromium for the reports' browser test (tests/e2e/test_report_browser.py), from
# Debian's packages: only when apt-get exists and we are root (a container, CI), and only when
# no chromium is on PATH; the package lists are refreshed once if the install fails. Never fails
# the set-up: without it the browser test skips and says why.
browser:
	@if command -v chromium >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y --no-install-recommends chromium \
	    || { apt-get update && apt-get install -y --no-install-recommends chromium; } \
	    || echo "make browser: chromium could not be installed; the browser test will skip"; \
	else echo "make browser: no apt-get, or not root: chromium not installed; the browser test will skip"; \
	fi

$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -c constraints.txt -e '.[dev,dist]'
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

$(SAM_VENV)/.installed-$(SAM_CLI_VERSION):
	test -x $(SAM_VENV)/bin/python || $(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/python -m pip install -q 'aws-sam-cli==$(SAM_CLI_VERSION)'
	touch $@

# Synthesizes cdk.out/ (layers built locally with pip, no Docker); pick a variant with
# `make synth STRATEGY=provisioned`.
synth: $(VENV)/.installed node_modules/.installed
	npx cdk synth --quiet $(if $(STRATEGY),-c warmstart:strategy=$(STRATEGY))

cfn-lint: synth
	$(VENV)/bin/cfn-lint $(TEMPLATE)

sam-validate: synth $(SAM_VENV)/.installed-$(SAM_CLI_VERSION)
	$(SAM) validate --lint --template $(TEMPLATE)

# Needs Docker (or Finch). SAM cannot map the nested construct path Warmstart/Agent-NAME/Function
# to a function id, so the function's logical id is looked up in the template (AGENT=lookup for
# another agent).
sam-local-invoke: synth $(SAM_VENV)/.installed-$(SAM_CLI_VERSION)
	$(SAM) local invoke --template $(TEMPLATE) --event $(EVENT) \
	  "$$($(PY) -c 'import json,sys; t=json.load(open(sys.argv[1])); print(next(k for k, v in t["Resources"].items() if v.get("Metadata", {}).get("aws:cdk:path") == "Warmstart/Agent-$(AGENT)/Function/Resource"))' $(TEMPLATE))"

demo: setup
	$(PY) -m infra.cli demo

# lint first (about 2 s): `make lint` was clean on 2026-12-04 and a test run keeps it so
test: setup
	$(VENV)/bin/ruff check functions warmers infra tests bench
	$(PY) -m pytest

bench: setup
	$(PY) -m bench

lint: setup
	$(VENV)/bin/ruff check functions warmers infra tests bench

clean:
	rm -rf cdk.out .cache .pytest_cache
