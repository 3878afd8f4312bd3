# muster: `make demo` runs the embedded stack and a demo; `make up` keeps the stack running;
# `make test` runs every test.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DATA   ?= .muster

.PHONY: setup demo up test fuzz chaos unit lint bench bench-full migrate clean

GEN    := libs/muster/api/v1/muster_pb2.py
PYC    := $(VENV)/.compiled

# Byte-code is checked by hash, not file time, and compiled ahead: every test stack starts
# five service processes, and where PYTHONDONTWRITEBYTECODE is set (or file times moved
# after install) each would otherwise compile every module it imports, every start.
setup: $(STAMP) $(GEN) $(PYC)
	$(BIN)/python -m compileall -q -j0 --invalidation-mode checked-hash libs services sdk/python

$(PYC): $(STAMP)
	$(BIN)/python -m compileall -q -j0 --invalidation-mode checked-hash $(VENV)/lib
	touch $(PYC)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The gRPC code, from the .proto with the pinned grpcio-tools (reproducible; not in git).
$(GEN): proto/muster/api/v1/muster.proto libs/muster/api/codegen.py $(STAMP)
	$(BIN)/python -m muster.api.codegen

migrate: setup
	mkdir -p $(DATA)
	MUSTER_STORE_URL=sqlite+aiosqlite:///$(abspath $(DATA))/muster.db $(BIN)/muster migrate

# On a terminal the stack stays up after the demo (Ctrl-C stops it); otherwise (CI, a pipe)
# the demo ends and prints the `muster up` command that starts it again over its store.
demo: setup
	$(BIN)/muster demo --data-dir $(DATA)

# The embedded stack in the foreground over $(DATA) until Ctrl-C (docs/operations.md).
up: setup
	$(BIN)/muster up --data-dir $(DATA)

test: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

# Property tests with fresh random examples each run (`make test` draws the same ones).
fuzz: setup
	MUSTER_HYPOTHESIS_PROFILE=fuzz $(BIN)/python -m pytest -q -p no:cacheprovider tests/property $(PYTEST_ARGS)

# The stack under faults (every service SIGKILLed, the broker killed, PostgreSQL cut when
# MUSTER_TEST_POSTGRES_URL is set), checked by an independent checker (tests/chaos); then
# the hostile-input run (auth on, every surface attacked, a healthy tenant measured).
chaos: setup
	$(BIN)/python -m tests.chaos.run $(CHAOS_ARGS)
	$(BIN)/python -m tests.chaos.hostile $(HOSTILE_ARGS)

unit: setup
	$(BIN)/python -m pytest -q tests/unit

lint: setup
	$(BIN)/ruff check libs services tests bench migrations sdk
	$(BIN)/mypy

bench: setup
	$(BIN)/python -m bench.store_appends
	$(BIN)/python -m bench.long_log
	$(BIN)/python -m bench.e2e_submit
	$(BIN)/python -m bench.submit_api --workloads 2000
	$(BIN)/python -m bench.replay
	$(BIN)/python -m bench.kueue_baseline --scale 0.3
	$(BIN)/python -m bench.kueue_baseline --services --scale 0.3
	$(BIN)/python -m bench.cycle_scale --pending 10000 --baseline 1000
	$(BIN)/python -m bench.dws_provisioning --scale 0.3 --services-scale 0.2 --real-step-seconds 1
	$(BIN)/python -m bench.placement
	$(BIN)/python -m bench.hostile_apply
	$(BIN)/python -m bench.busy_trace
	$(BIN)/python -m bench.traces --trace itp --check

bench-full: setup  # Kueue's full baseline shape, the 100,000-pending cycle, DWS at 1,000 requests, 1,000 gangs on 10,000 nodes (~15.5 min)
	$(BIN)/python -m bench.kueue_baseline
	$(BIN)/python -m bench.kueue_baseline --services
	$(BIN)/python -m bench.cycle_scale
	$(BIN)/python -m bench.dws_provisioning
	$(BIN)/python -m bench.placement --full
	$(BIN)/python -m bench.submit_api --workloads 20000
	$(BIN)/python -m bench.traces --check  # both traces, every config (Philly's cohort alone ~7 min)

clean:
	rm -rf $(VENV) $(DATA)
