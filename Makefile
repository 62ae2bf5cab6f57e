# Developer entry points. `make test` and `make run` set up .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PACKAGE_FILES := requirements-dev.txt pyproject.toml $(wildcard ragen-env-*/pyproject.toml ragen-filters/pyproject.toml plugins/*/pyproject.toml)
STEPS ?=
PYTEST_ARGS ?=
# Where torch comes from. Empty: pip's own configuration (on this project's machines it offers the
# local CPU wheel). On a plain PyPI machine, whose default Linux torch is a multi-GB CUDA build:
# make run TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=

.PHONY: setup test lint run check-standalone clean

setup: $(STAMP)
	@# bubblewrap: the deepcoder env's code sandbox. Installed only as root with apt-get; never fails setup.
	@command -v bwrap >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
	  && { apt-get install -y -qq bubblewrap >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq bubblewrap >/dev/null 2>&1; }; } \
	  && echo "installed bubblewrap (sandbox of the deepcoder env)"; } \
	  || echo "note: bubblewrap (bwrap) is not installed; the deepcoder env sandboxes programs with it (apt-get install bubblewrap)"
	@# chromium: the webshop env's headless-browser test and screenshots. Installed only as root with apt-get; never fails setup.
	@{ command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; } || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
	  && { apt-get install -y -qq chromium >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1; }; } \
	  && echo "installed chromium (browser test of the webshop env)"; } \
	  || echo "note: chromium is not installed; the webshop env's browser test is skipped without it (apt-get install chromium)"

$(STAMP): $(PACKAGE_FILES)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install -q hatchling editables
	$(BIN)/python -m pip install -q --no-build-isolation -r requirements-dev.txt
	touch $(STAMP)

test: setup
	$(BIN)/ragen plugins check --strict
	$(BIN)/python -m pytest -q -n 2 --timeout=900 $(PYTEST_ARGS)

# Lint and types, settings in pyproject.toml: ruff over every package's sources, the tests and the
# benches; mypy (strict) over ragen_core.
LINT_PATHS := ragen_core $(wildcard plugins/*/src plugins/*/tests ragen-*/src ragen-*/tests) tests bench
lint: setup
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/mypy

run: setup
	$(BIN)/ragen run --env bandit --recipe learn $(if $(STEPS),--steps $(STEPS))

check-standalone:
	scripts/check-standalone.sh

clean:
	rm -rf $(VENV) runs
