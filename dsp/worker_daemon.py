"""Spark's Python worker daemon (`spark.python.daemon.module`), minus a per-task cost.

Before every task a worker calls `importlib.invalidate_caches()` so that files added with
`addFile`/`addPyFile` become importable. On Python 3.11 that re-reads the central directory of
every zip archive on the path, once per cached package inside it: pyspark.zip, py4j's zip and the
spark-core jar, 16 importers in all, about 0.12 s of CPU per task on an idle machine — more than
the whole work of a typical HiFi micro-batch. Archives on the path never change while a worker
lives, so here the invalidation skips zip importers and still refreshes directory finders.
(Since dsp/python_worker.sh the Spark archives are off a local worker's path; this still saves
the cost when PYSPARK_PYTHON is set by the user, and for any other archive on the path.)
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import zipimport


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
    from pyspark.daemon import manager

    manager()
