# swarmscope — the two commands are `make run` and `make test` (see README.md).
# Every target installs what it needs first (tools/setup.sh is idempotent and fast when done).

PY := .venv/bin/python
SETUP_STAMP := .venv/.setup-done

.PHONY: setup run test tools lint typecheck pytest proto bench bench-http bench-http-k6 clean

setup:
	tools/setup.sh

# The main job on one machine: exec storm, 2 simulated nodes, bpftrace as tracer under test.
run: setup
	.venv/bin/swarmscope run scenarios/exec_storm.yaml --set tracer=bpftrace --out results/

test: setup lint typecheck tools pytest

# Every Go tool and the image the tests run, built (or found cached) before the tests start.
tools: setup
	tools/build_tools.sh

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/lint-imports   # import direction: .importlinter

typecheck:
	.venv/bin/mypy

pytest:
	$(PY) -m pytest -ra $(PYTEST_ARGS)

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
