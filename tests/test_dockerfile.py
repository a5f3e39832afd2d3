"""The HiFi image (deploy/Dockerfile) holds what the services import and read: every package
pyproject.toml lists and every file they open at run time. There is no container engine here,
so the Dockerfile's COPY lines are read against the repository."""

from __future__ import annotations

import pathlib
import re
import tomllib

REPO = pathlib.Path(__file__).resolve().parent.parent
# What the services read from the checkout at run time (services.paths, the compose file's
# generated code): the topologies and scenarios, the protobuf definitions.
RUN_TIME_FILES = ["deploy/topologies/supply-chain.yaml", "deploy/scenarios/supply-chain.yaml", "protos/hifi.proto"]


def copied() -> list[str]:
    """The sources of the Dockerfile's COPY lines, as paths in the repository."""
    lines = (REPO / "deploy" / "Dockerfile").read_text().splitlines()
    return [source.rstrip("/") for line in lines if (m := re.match(r"COPY\s+(.+)\s+\S+$", line))
            for source in m.group(1).split()]


def in_image(path: str, sources: list[str]) -> bool:
    return any(path == source or path.startswith(source + "/") for source in sources)


def test_the_image_copies_every_package_pyproject_lists():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = project["tool"]["setuptools"]["packages"]
    sources = copied()
    missing = [p for p in packages if not in_image(p.replace(".", "/"), sources)]
    assert missing == [], f"deploy/Dockerfile copies no {missing}"
    data = [f"{package.replace('.', '/')}/{pattern}" for package, patterns in
            project["tool"]["setuptools"]["package-data"].items() for pattern in patterns]
    assert [d for d in data if not in_image(d, sources)] == []


def test_the_image_copies_the_files_the_services_read_at_run_time():
    sources = copied()
    assert "pyproject.toml" in sources
    assert [path for path in RUN_TIME_FILES if not in_image(path, sources)] == []
    assert all((REPO / path).exists() for path in RUN_TIME_FILES)


def test_a_dockerfile_without_a_package_is_caught():
    """The check itself: the image before base/ was copied (issue 63) fails it."""
    without = [s for s in copied() if s != "base"]
    assert not in_image("base", without) and in_image("base", copied())


def test_the_image_fetches_sparks_kafka_connector_where_the_session_finds_it():
    text = (REPO / "deploy" / "Dockerfile").read_text()
    fetched = re.search(r'ENV HIFI_JARS=(\S+)\nRUN bash deploy/fetch-jars.sh "\$HIFI_JARS" spark', text)
    assert fetched is not None and (REPO / "deploy" / "jvm" / "spark" / "pom.xml").exists()
    assert re.search(r"apt-get install .*\bmaven\b", text)
