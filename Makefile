# gitmd — every target sets up what it needs (venv, protobuf code, shim) by itself.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
GEN := gitmd/api/_generated
PROTO := protos/gitm/v1/gitmd.proto
GEN_STAMP := $(GEN)/gitm/v1/gitmd_pb2.py


.PHONY: all venv proto shim build run test test-unit test-integration lint fmt deb gpu-wheels bench corpus bench-corpus corpus-summary clean

all: build

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	touch $@

venv: $(STAMP)

$(GEN_STAMP): $(PROTO) $(STAMP)
	rm -rf $(GEN)
	mkdir -p $(GEN)
	$(PY) -m grpc_tools.protoc -Iprotos --python_out=$(GEN) --pyi_out=$(GEN) --grpc_python_out=$(GEN) $(PROTO)
	sed -i 's/^from gitm\.v1 import /from gitmd.api._generated.gitm.v1 import /' $(GEN)/gitm/v1/gitmd_pb2_grpc.py
	touch $(GEN)/__init__.py $(GEN)/gitm/__init__.py $(GEN)/gitm/v1/__init__.py $(GEN)/py.typed

proto: $(GEN_STAMP)

shim:
	$(MAKE) -C shim all

build: venv proto shim

run: build
	bash tools/run-dev.sh

test: build
	$(PY) -m pytest -q -p no:cacheprovider tests/unit tests/integration tests/shim

test-unit: build
	$(PY) -m pytest -q tests/unit

test-integration: build
	$(PY) -m pytest -q tests/integration

lint: build
	$(VENV)/bin/ruff check gitmd gitmctl tests bench tools
	$(VENV)/bin/ruff format --check gitmd gitmctl tests bench tools
	$(VENV)/bin/mypy

fmt: venv
	$(VENV)/bin/ruff format gitmd gitmctl tests bench tools
	$(VENV)/bin/ruff check --fix gitmd gitmctl tests bench tools

# Third-party corpus (bench/corpus/): extract the pinned sources from the mirrors, write synthetic data.
corpus:
	$(PYTHON) bench/corpus/materialise.py
	$(PYTHON) bench/corpus/data.py

# The corpus scoreboard on this host's GPU, parts that fit a 10-minute device call:
#   make bench-corpus PARTS=timm-resnet18-train-fp32,cupy-cg [RUNS=5] [ORACLE=none|a,b]
# then `make corpus-summary` writes a new dated summary (bench/results/<date>-corpus-summary.json, or
# <date>-corpus-summary-2.json and on when that day has one: results are never overwritten) from every
# raw file, and points the link bench/results/corpus-latest.json at it.
bench-corpus:
	$(PYTHON) bench/corpus/scoreboard.py --programs "$(PARTS)" --runs "$(or $(RUNS),5)" \
		--oracle-levers "$(ORACLE)" --out bench/results/$$(date +%Y-%m-%d)-corpus

corpus-summary:
	$(PYTHON) bench/corpus/summary.py

deb: build
	bash packaging/deb/build.sh

# The scoreboard on a GPU host: every workload against the oracle (bench/run.py; WORKLOADS=a,b for
# parts). Writes bench/results/<date>-h200.md.
bench: build
	$(VENV)/bin/python bench/run.py $(if $(WORKLOADS),--workloads $(WORKLOADS),)

# Wheels the GPU host lacks (it has no package index); tests/gpu/run.sh installs them there.
gpu-wheels: build
	bash tools/gpu-wheels.sh

clean:
	rm -rf $(VENV) $(GEN) build dist *.egg-info var .pytest_cache
	$(MAKE) -C shim clean
