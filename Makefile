# swarmscope — the two commands are `make run` and `make test` (see README.md).
# Every target installs what it needs first (tools/setup.sh is idempotent and fast when done).

PY := .venv/bin/python
# Each step prints its wall time (tools/timed.sh), so a slow step is named where it ran.
TIMED := tools/timed.sh
SETUP_STAMP := .venv/.setup-done

.PHONY: setup setup-run run test test-fast tools lint typecheck pytest pytest-fast proto bench bench-http bench-http-k6 clean

setup:
	$(TIMED) setup tools/setup.sh

# What `make run` needs and no more (no Go, Chromium or test tools): a fresh machine's first run.
setup-run:
	$(TIMED) setup tools/setup.sh --no-dev

# The main job on one machine: exec storm, 2 simulated nodes, bpftrace as tracer under test.
run: setup-run
	.venv/bin/swarmscope run scenarios/exec_storm.yaml --set tracer=bpftrace --out results/

test: setup lint typecheck tools pytest

# The development loop (under 3 min warm): every test but the cluster/image/Jaeger ones and the
# slow ones. The Go tools it runs (helm, k6, ig, …) come from `make tools`; a missing one fails
# its test at once naming that target.
test-fast: setup lint typecheck pytest-fast

# Every Go tool and the image the tests run, built (or found cached) before the tests start.
tools: setup
	$(TIMED) tools tools/build_tools.sh

lint:
	$(TIMED) ruff .venv/bin/ruff check .
	$(TIMED) ruff-format .venv/bin/ruff format --check .
	$(TIMED) lint-imports .venv/bin/lint-imports   # import direction: .importlinter

typecheck:
	$(TIMED) mypy .venv/bin/mypy

pytest:
	$(TIMED) pytest $(PY) -m pytest -ra --durations=10 $(PYTEST_ARGS)

pytest-fast:
	$(TIMED) pytest-fast $(PY) -m pytest -ra --durations=10 -m "not cluster and not slow" $(PYTEST_ARGS)

proto:
	$(PY) tools/genproto.py

bench: setup
	$(PY) bench/exec_storm.py

# Ingress: swarmscope's Locust/k6 paths vs plain Locust/k6 on the same local nginx, wrk as ceiling.
bench-http: setup
	$(PY) bench/http_flood.py --users 50 --repeat 3

# The k6 rows alone: plain (upstream) k6, the k6 path, and the references (a few minutes).
bench-http-k6: setup
	$(PY) bench/http_flood.py --users 50 --paths k6 --repeat 3

clean:
	rm -rf .venv results build dist
