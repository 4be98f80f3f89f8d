# Two commands on a fresh machine: `make demo` and `make test`. Each bootstraps .venv itself.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
DEPS   := pyproject.toml functions/requirements.txt

.PHONY: test demo lint typecheck bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(VENV)/.dev-installed: $(PY) $(DEPS)
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

$(VENV)/.demo-installed: $(PY) $(DEPS)
	$(PY) -m pip install -q -e '.[ops,local]'
	touch $@

test: $(VENV)/.dev-installed  ## ruff, then the whole pytest suite
	$(PY) -m ruff check .
	$(PY) -m pytest -q

demo: $(VENV)/.demo-installed  ## agentwake on the embedded local AWS: no account, no Docker
	$(PY) -m agentwake.ops.demo

lint: $(VENV)/.dev-installed
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

typecheck: $(VENV)/.dev-installed
	$(PY) -m mypy functions/agentwake

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
