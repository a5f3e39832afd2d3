# HiFi: `make run` brings up the supply-chain hierarchy; `make test` runs the whole test suite.
# Both set everything up first: Debian packages (as root), .venv with pinned Python packages,
# and the protobuf/gRPC code generated from protos/hifi.proto.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PROTO_OUT := protos/hifi_pb2.py protos/hifi_pb2_grpc.py

.PHONY: setup run test lint bench clean system-deps proto

setup: system-deps $(STAMP) $(PROTO_OUT)

system-deps:
	@bash deploy/install-system-deps.sh

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

proto: $(PROTO_OUT)

$(PROTO_OUT): protos/hifi.proto $(STAMP)
	$(PY) -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. --pyi_out=. protos/hifi.proto

run: setup
	$(VENV)/bin/hifi up

test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q --durations=15

bench: setup
	$(VENV)/bin/hifi bench pipeline

clean:
	rm -rf $(VENV) protos/*_pb2*.py protos/*_pb2.pyi .pytest_cache .ruff_cache
