SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TOOLS := .tools
BUF := $(TOOLS)/node_modules/.bin/buf
BUF_VERSION := 1.75.0

.PHONY: help install run test test-cluster browser chaos lint fmt proto proto-check buf-lint buf-breaking polyglot-check go-stubs docs docs-check bench bench-cpu bench-context bench-latency bench-http bench-ingest bench-million load eval bench-locomo clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-15s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml engram_client/pyproject.toml mcp_shim/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ./engram_client -e ./mcp_shim -e ".[dev,rerank]"
	touch $@

$(BUF):
	npm install --silent --no-audit --no-fund --prefix $(TOOLS) @bufbuild/buf@$(BUF_VERSION)

install: $(VENV)/.installed ## Create .venv and install everything

run: install ## Start the server on its embedded defaults (Qdrant edge + local model, ./data)
	$(PY) -m engram_server serve

browser: ## Debian's chromium + chromedriver for the console's browser test (installed when missing and root)
	@if ! command -v chromedriver >/dev/null 2>&1; then \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    apt-get install -y -qq chromium chromium-driver >/dev/null || \
	      { apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; } || \
	      echo "could not install chromium: the console browser test will be skipped" >&2; \
	  else \
	    echo "chromium/chromedriver missing and not installable here (needs apt-get as root): the console browser test will be skipped" >&2; \
	  fi; \
	fi

test: install lint browser ## Lint, type-check, then run the whole test suite
	$(PY) -m pytest -q

chaos: install ## The chaos suite alone: hostile clients, full disks, oversized answers, over loopback
	$(PY) -m pytest -q tests/chaos

test-cluster: install ## A real 3-node Qdrant cluster on loopback: placement, kill -9 of a node under writes (figures in results/cluster)
	mkdir -p results/cluster
	ENGRAM_TEST_CLUSTER=1 ENGRAM_CLUSTER_FIGURES=results/cluster/figures $(PY) -m pytest -q -s tests/cluster

lint: install proto-check docs-check buf-lint buf-breaking polyglot-check ## ruff, ruff format, mypy, buf lint + format, buf breaking, Go/TS checks, generated code and docs checks
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

fmt: install ## Format the code
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

proto: install ## Regenerate the Python code from proto/
	$(PY) scripts/gen_protos.py

proto-check: install ## Fail if the committed generated code differs from proto/
	$(PY) scripts/gen_protos.py --check

buf-lint: $(BUF) ## buf lint (STANDARD) over proto/
	$(BUF) lint
	$(BUF) format --diff --exit-code

bench: install ## Where a search's time goes: per-stage costs and the floor at 10k / 100k (reports in results/bench)
	$(PY) bench/stages.py --memories 10000,100000 --samples 200 --json results/bench/stages.json --md results/bench/stages.md

bench-cpu: install ## Engram's own CPU per search, search p50 and RPS at c=32 beside the engine alone, 100k, embeddings known (not in CI)
	test -d results/bench/corpus/data-100000 || $(PY) bench/stages.py --memories 100000 --samples 1 --keep results/bench/corpus
	$(PY) bench/cpu.py --data results/bench/corpus/data-100000 --queries 200 --rounds 3 --json results/bench/cpu.json

bench-context: install ## GetContext (the context pack) p50 at 10k memories beside SearchMemories (not part of CI)
	$(PY) bench/context.py --memories 10000 --samples 50

bench-latency: install ## Add/search latency at 10k memories ingested through the API (not part of CI)
	$(PY) bench/latency.py --memories 10000 --samples 200

bench-http: install ## HTTP/JSON vs gRPC latency on one server, transports alternating call by call (not in CI)
	$(PY) bench/http_vs_grpc.py --memories 2000 --samples 300

bench-ingest: install ## Ingest memories/s: AddMemory vs AddMemories batches vs the model's own batch rate (not in CI)
	$(PY) bench/ingest.py

MEMORIES ?= 1000000
bench-million: install ## MEMORIES (default 1M) through AddMemories, then engram serve on them: latency, RSS (not in CI; ~1.5 h)
	$(PY) bench/million.py --memories $(MEMORIES) --json results/million/million.json --md results/million/million.md

buf-breaking: $(BUF) ## buf breaking (FILE) of proto/ against main
	scripts/polyglot_buf_breaking.sh $(BUF)

go-stubs: install ## Regenerate the Go stubs (clients/go/engram/v1) from proto/
	$(PY) scripts/polyglot_gen_go.py

polyglot-check: install ## Go stubs vs proto/, gofmt, go vet, TypeScript tsc (skipped without go / node)
	scripts/polyglot_check.sh $(PY)

ROUNDS ?= 2
load: install ## ghz load test against a fresh server on the embedded defaults (reports in results/load; ROUNDS=2)
	$(PY) bench/load.py --rounds $(ROUNDS)

eval: install ## Regression taskset through the gRPC API of an in-process server (reports in results/eval)
	$(PY) -m eval.regression --out results/eval
	$(PY) -m eval.gate_pairs --out results/eval

LOCOMO ?= ../shared/data/locomo/locomo_dev.json
CONVERSATIONS ?= report
bench-locomo: install ## LoCoMo evidence recall on the held-out dev conversations (CONVERSATIONS=tune|all|ids; LOCOMO=file)
	$(PY) -m eval.locomo --data $(LOCOMO) --out results/locomo --conversations $(CONVERSATIONS) $(if $(RERANK),--rerank $(RERANK))

docs: install ## Regenerate the API and configuration references, build the site into site/ (--strict)
	$(PY) scripts/gen_api_docs.py
	$(PY) scripts/gen_config_docs.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

docs-check: install ## Fail if the generated references are out of date or the site has a broken link or page
	$(PY) scripts/gen_api_docs.py --check
	$(PY) scripts/gen_config_docs.py --check
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

clean: ## Remove the virtualenv and tool caches
	rm -rf $(VENV) $(TOOLS) site .pytest_cache .mypy_cache .ruff_cache
