# HiFi: `make run` brings up the supply-chain hierarchy; `make test` runs the whole test suite.
# Both set everything up first: Debian packages (as root), .venv with pinned Python packages,
# the JVM parts with Maven (Apache Kafka: deploy/jvm/*/pom.xml into .venv/jars), and the
# protobuf/gRPC code generated from protos/hifi.proto.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PROTO_OUT := protos/hifi_pb2.py protos/hifi_pb2_grpc.py
# The JVM's class-data archive of Spark's classes: a node's Spark starts ~3 s sooner (dsp/spark/session.py)
CLASS_ARCHIVE := $(VENV)/hifi-spark.jsa
# The same for the embedded broker's JVM (services/kafka_broker.py): it answers ~2 s sooner
KAFKA_ARCHIVE := $(VENV)/jars/kafka.jsa

.PHONY: setup run test lint bench clean system-deps proto jars

setup: system-deps $(STAMP) jars $(PROTO_OUT) $(CLASS_ARCHIVE) $(KAFKA_ARCHIVE)

system-deps:
	@PYTHON=$(PYTHON) bash deploy/install-system-deps.sh

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Each set is fetched again only when its pom changes (the script's stamp)
jars: $(STAMP)
	@bash deploy/fetch-jars.sh $(VENV)/jars

proto: $(PROTO_OUT)

$(PROTO_OUT): protos/hifi.proto $(STAMP)
	$(PY) -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. --pyi_out=. protos/hifi.proto

$(KAFKA_ARCHIVE): $(VENV)/jars/kafka/.pom.sha256
	$(PY) -m services.kafka_broker --archive || echo "no class-data archive of the broker: it starts ~2 s slower"

$(VENV)/jars/%/.pom.sha256: deploy/jvm/%/pom.xml | jars
	@bash deploy/fetch-jars.sh $(VENV)/jars

$(CLASS_ARCHIVE): $(STAMP) $(PROTO_OUT) $(VENV)/jars/spark/.pom.sha256
	$(PY) -m dsp.spark.session --archive || echo "no class-data archive: Spark starts without it, ~3 s slower"

run: setup
	$(VENV)/bin/hifi up

test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mkdocs build --strict --quiet
	$(PY) -m pytest -q -m unit -n 2 --durations=5
	$(PY) -m pytest -q -m "not unit" --durations=15

bench: setup
	$(VENV)/bin/hifi bench pipeline

clean:
	rm -rf $(VENV) protos/*_pb2*.py protos/*_pb2.pyi .pytest_cache .ruff_cache
