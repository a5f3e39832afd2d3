"""The handoff of decoded rows from Spark's Python workers to the driver on a local Spark: an
Arrow file each, memory-mapped by the driver (the rows never cross the JVM), swept when old."""

from __future__ import annotations

import os
import time

import pyarrow as pa

HANDOFF_COLUMN = "__handoff"


def take_handoff(table: pa.Table) -> pa.Table:
    """The rows a micro-batch of a `handoff_dir` reader carried, from the files its tasks wrote (in
    the order Spark returned the tasks' rows), the files removed. Memory-mapped: the rows are not
    copied again (Linux keeps a removed file's pages while they are mapped)."""
    schema = table.drop_columns([HANDOFF_COLUMN]).schema   # the rows' as Spark would have returned them
    tables = [schema.empty_table()]   # a batch with no task has no file
    for path in table.column(HANDOFF_COLUMN).to_pylist():
        with pa.memory_map(path) as source:
            found = pa.ipc.open_file(source).read_all()
        tables.append(found if found.schema.equals(schema) else found.cast(schema))
        os.unlink(path)
    return pa.concat_tables(tables)


def sweep_handoff(directory: str, older_than_s: float = 0.0) -> None:
    """Remove handoff files no batch will take: a failed task's, a batch the driver skipped."""
    if not os.path.isdir(directory):
        return
    now = time.time()
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        try:
            if now - os.path.getmtime(path) >= older_than_s:
                os.unlink(path)
        except FileNotFoundError:
            pass
