# Two commands on a fresh machine: `make demo` and `make test`. Each bootstraps .venv itself.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
DEPS   := pyproject.toml setup.py functions/requirements.txt

.PHONY: test demo lint typecheck bench bench-5000 bench-dlq soak fuzz load validate clean dlq-scale schemas chromium

$(PY):
	$(PYTHON) -m venv $(VENV)

$(VENV)/.dev-installed: $(PY) $(DEPS)
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

$(VENV)/.demo-installed: $(PY) $(DEPS)
	$(PY) -m pip install -q -e '.[ops,local]'
	touch $@

# The suite runs on four workers (pytest-xdist, TEST_WORKERS of them), a test file per worker: a
# module's local stack (tests/e2e) starts once, in one worker. Every test keeps its state in its own
# temporary directories and servers on free ports, so workers never share a file or a port. Four on
# two cores, because about half of the suite's time is waiting (browsers, local stacks, timers the
# tests wait out): with two workers the cores were busy about half the time.
TEST_WORKERS ?= 4

test: $(VENV)/.dev-installed  ## ruff, mypy on the runtime, then the whole pytest suite on four workers (installs the browser tests' chromium first if missing)
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then $(MAKE) --no-print-directory chromium; fi
	$(PY) -m ruff check .
	$(PY) -m mypy functions/agentwake
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=25  # the 25 slowest, to keep the suite near 10 minutes

# The console's browser tests drive Debian's headless Chromium through its chromedriver
# (tests/support/browser.py). Installed from the distribution's packages with apt-get (as root,
# waiting for another apt run's lock); nothing downloads a browser from the internet.
chromium:  ## Debian's chromium and chromium-driver (apt-get), when /usr/bin/chromium or /usr/bin/chromedriver is missing
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then echo "chromium and chromedriver are installed"; else \
	    if [ "$$(id -u)" != 0 ]; then echo "make chromium: run as root (apt-get install chromium chromium-driver)"; exit 1; fi; \
	    apt-get -o DPkg::Lock::Timeout=600 update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends chromium chromium-driver; \
	fi

demo: $(VENV)/.demo-installed  ## agentwake on the embedded local AWS: no account, no Docker
	$(PY) -m agentwake_local.demo

# the functions' JSON logs and Powertools warnings go to CHAT_LOG; CHAT_VERBOSE=1 prints them here;
# CHAT_PORT (default 8766: the console keeps 8765); CHAT_SLOW_WAKE=SECONDS holds each wake's session that long
CHAT_LOG ?= $(or $(AGENTWAKE_HOME),$(HOME)/.agentwake)/chat.log
.PHONY: chat
chat: $(VENV)/.demo-installed  ## the reference chat app (examples/chat-app/) on the local stack named chat: http://127.0.0.1:8766/
	$(PY) $(if $(CHAT_VERBOSE),,-m agentwake_local.function_output $(CHAT_LOG)) examples/chat-app/app.py --port $(or $(CHAT_PORT),8766) $(if $(CHAT_SLOW_WAKE),--slow-wake $(CHAT_SLOW_WAKE))

lint: $(VENV)/.dev-installed
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

typecheck: $(VENV)/.dev-installed
	$(PY) -m mypy functions/agentwake

schemas: $(VENV)/.dev-installed  ## regenerate schemas/*.schema.json (the producer contract) from the models
	$(PY) -m agentwake.product.contract schemas

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache

# `sam validate --lint` with aws-sam-cli kept out of .venv (it pins many packages). Fake
# credentials and no telemetry: nothing here contacts AWS.
SAM_VENV := .venv-sam
SAM_ENV  := env -u AWS_PROFILE -u AWS_ENDPOINT_URL AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing \
            AWS_SESSION_TOKEN=testing AWS_DEFAULT_REGION=us-east-1 SAM_CLI_TELEMETRY=0

$(SAM_VENV)/bin/sam:
	$(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/python -m pip install -q aws-sam-cli

.PHONY: validate
validate: $(SAM_VENV)/bin/sam  ## template.yaml: SAM transform (sam validate), then cfn-lint (--lint)
	$(SAM_ENV) $(SAM_VENV)/bin/sam validate --region us-east-1
	$(SAM_ENV) $(SAM_VENV)/bin/sam validate --lint --region us-east-1

soak: $(VENV)/.dev-installed  ## the crash/retry/duplicate/redrive state machine with 200 examples (from a fixed seed, and from a random one), the full fault matrices (the wake's; the park's, the decision's, the re-queue's and the resume's), and a parked run waiting 10 minutes on the local stack with no invocation (minutes)
	AGENTWAKE_HYPOTHESIS_EXAMPLES=200 AGENTWAKE_FAULT_MATRIX=full $(PY) -m pytest -q tests/integration/test_durable_properties.py tests/integration/test_fault_matrix.py tests/integration/test_fault_matrix_lanes.py
	AGENTWAKE_FAULT_MATRIX=full $(PY) -m pytest -q -n $(TEST_WORKERS) tests/integration/test_approvals.py -k fault_at_any_call
	AGENTWAKE_PARK_WAIT_S=600 $(PY) -m pytest -q tests/e2e/test_parked_runs_local.py -k no_invocation

load: $(VENV)/.dev-installed  ## the busy-session tests: 50 completions for one session, 10 sessions x 20, each session busy >= 90 % (minutes)
	AGENTWAKE_BURST=50 AGENTWAKE_BURST_MANY=10x20 $(PY) -m pytest -q -s tests/e2e/test_busy_sessions.py tests/e2e/test_session_handoff.py

fuzz: $(VENV)/.dev-installed  ## 10,000 poison bodies through the result handler, then dlq list/show/export (minutes)
	AGENTWAKE_FUZZ_BODIES=10000 $(PY) -m pytest -q -p no:logging tests/security/test_poison_fuzz.py

bench: $(VENV)/.dev-installed  ## benchmarks (ratios against a floor measured in the same run)
	$(PY) bench/bench_wake.py
	@# the cold init again with the runtime's Python where this machine has one (bench_wake's is this venv's)
	@if make -s -f functions/Makefile check-python 2>/dev/null; then \
	    $(PY) bench/cold_init.py --modes source,shipped --python "$$(make -s -f functions/Makefile print-BUILD_PYTHON)"; \
	else echo "cold init compiled by python3.13: not measured (no python3.13 here)"; fi
	$(PY) bench/cold_init.py --pair api
	$(PY) bench/bench_local.py --n 500
	$(PY) bench/bench_cli.py
	$(PY) bench/walk_background.py
	$(PY) bench/any_params.py
	$(PY) bench/burst.py

bench-5000: $(VENV)/.dev-installed  ## 5,000 wakes through the local stack against its floor (about 40 minutes)
	$(PY) bench/bench_local.py --n 5000

# BENCH_DLQ_VS: the commit this tree is paired with in the same run (default main)
BENCH_DLQ_VS ?= main
bench-dlq: $(VENV)/.dev-installed  ## dlq list over 10,000 messages on the local moto server: wall, the CLI's CPU, the server's, paired with $(BENCH_DLQ_VS) (minutes)
	$(PY) bench/bench_dlq_list.py --messages 10000 --runs 2 --vs $(BENCH_DLQ_VS)

dlq-scale: $(VENV)/.dev-installed  ## the DLQ scan tests (and the one-Query redrive --id) at 10,000 messages on the local moto server (minutes)
	AGENTWAKE_DLQ_SCALE=10000 $(PY) -m pytest -q tests/e2e/test_dlq_scale.py
