"""Spark's Python worker daemon (`spark.python.daemon.module`), minus a per-task cost.

Before every task a worker calls `importlib.invalidate_caches()` so that files added with
`addFile`/`addPyFile` become importable. On Python 3.11 that re-reads the central directory of
every zip archive on the path, once per cached package inside it: pyspark.zip, py4j's zip and the
spark-core jar, 16 importers in all, about 0.12 s of CPU per task on an idle machine — more than
the whole work of a typical HiFi micro-batch. Archives on the path never change while a worker
lives, so here the invalidation skips zip importers and still refreshes directory finders.
(Since dsp/spark/python_worker.sh the Spark archives are off a local worker's path; this still saves
the cost when PYSPARK_PYTHON is set by the user, and for any other archive on the path.)

The daemon also imports, once, the modules a HiFi reader's task imports (WORKER_MODULES), so each
worker it forks has them already: Spark forks a new worker whenever no idle one is at hand (the
second task of a backlog, the first after a minute without tasks), and that worker spent ~0.4 s
importing them on an idle machine, ~0.7 s beside a busy reader (measured). Spark's own daemon
imports nothing before forking, in case an import starts threads; these start only pyarrow's
allocator thread (jemalloc, which takes its locks around a fork) and a waiting thread pool that
Arrow restarts in a forked child (tests/test_worker_daemon.py forks one and uses them).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import zipimport

# what a reader's task imports (dsp.spark.kafka_source, and through it wire, protos and both Kafka
# clients), and what it imports late: the pyarrow.compute of its hot path and the MDR client of its
# ingest statistics
WORKER_MODULES = ("dsp.spark.kafka_source", "pyarrow.compute", "mdr.repository")


def preload() -> None:
    for name in WORKER_MODULES:
        importlib.import_module(name)


def invalidate_caches_except_archives() -> None:
    for finder in sys.meta_path:
        if finder is importlib.machinery.PathFinder:
            continue
        invalidate = getattr(finder, "invalidate_caches", None)
        if invalidate is not None:
            invalidate()
    for finder in list(sys.path_importer_cache.values()):
        if finder is not None and not isinstance(finder, zipimport.zipimporter):
            invalidate = getattr(finder, "invalidate_caches", None)
            if invalidate is not None:
                invalidate()


if __name__ == "__main__":
    importlib.invalidate_caches = invalidate_caches_except_archives
    preload()
    from pyspark.daemon import manager

    manager()
