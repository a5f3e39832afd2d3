"""Where `make setup` puts the JVM parts it fetches (deploy/fetch-jars.sh: one folder per
deploy/jvm/<set>/pom.xml): the broker's jars (services.kafka_broker) and Spark's Kafka connector
(dsp.spark.session) are found by the same rule."""

from __future__ import annotations

import glob
import os
import sys


def jar_dir(name: str) -> str:
    """The folder of jar set `name` (HIFI_JARS overrides the root, `<venv>/jars` by default)."""
    root = os.environ.get("HIFI_JARS") or os.path.join(sys.prefix, "jars")
    return os.path.join(root, name)


def jars_of(name: str) -> list[str]:
    """The jars of set `name`, sorted (none: set-up has not fetched it)."""
    return sorted(glob.glob(os.path.join(jar_dir(name), "*.jar")))
