# Two commands for a newcomer: `make synth` and `make test`. Both install what they need into .venv
# and node_modules first; nothing relies on what was installed by hand.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# checkov (the security scan in tests/test_security_scan.py) pins dependencies that clash with ours,
# so it lives in its own venv; the tests call it as a subprocess.
CHECKOV_VENV := .venv-checkov
CHECKOV_VERSION := 3.3.30
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed-$(CHECKOV_VERSION)
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export CHECKPOINT_DISABLE := 1

.PHONY: install synth test bench bench-cli clean

$(STAMP): pyproject.toml package.json package-lock.json
	test -x $(PY) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check uv
# --compile-bytecode: write .pyc for all of site-packages once; without them the google provider
# (180 MB of Python) is compiled from source on every import (see `make bench ARGS=--no-pyc`).
	$(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(PY) -e '.[test]'
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(CHECKOV_STAMP): $(STAMP)
	test -x $(CHECKOV_VENV)/bin/python || python3 -m venv $(CHECKOV_VENV)
	$(VENV)/bin/uv pip install --quiet --python $(CHECKOV_VENV)/bin/python checkov==$(CHECKOV_VERSION)
	touch $@

install: $(STAMP) $(CHECKOV_STAMP)

synth: install
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" npx cdktf synth

test: install
	$(VENV)/bin/pytest -q

# Synth speed: the app command (lazy and full provider import) beside a bare provider import.
bench: install
	$(PY) bench/bench_synth.py $(ARGS)

# CLI start-up: --help, recipes and render, each in fresh processes (median and min; target: --help <= 0.3 s).
bench-cli: install
	$(PY) bench/cli_startup.py $(ARGS)

clean:
	rm -rf cdktf.out .pytest_cache
