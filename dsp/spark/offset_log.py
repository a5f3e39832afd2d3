"""Where a streaming query's micro-batch starts and ends, from the offset log in its checkpoint.

Spark writes `offsets/N` before it runs batch N (the log's format v1: a version line, the batch's
metadata, then one line of JSON per source), and batch N starts where batch N-1 ended. A shared
reader (dsp.runtime.shared) reads a small batch's records itself from these bounds instead of through a
Spark job. Anything else than one source in format v1 reads as unknown: Spark then reads the
batch, as it always could.
"""

from __future__ import annotations

import json
import os

Offsets = dict[str, int]   # {"topic:partition": offset}, the source's own offset (dsp.spark.kafka_source)


def parse_offsets(text: str) -> Offsets | None:
    """The source's offsets an offset-log file records, or None when it is not one source's v1 entry."""
    lines = text.splitlines()
    if len(lines) != 3 or lines[0] != "v1":
        return None
    try:
        found = json.loads(lines[2])
    except ValueError:
        return None
    if not isinstance(found, dict) or not all(isinstance(k, str) and type(v) is int for k, v in found.items()):
        return None
    return found


def batch_bounds(checkpoint: str, batch_id: int) -> tuple[Offsets, Offsets] | None:
    """(start, end) of batch `batch_id` of the query checkpointed at `checkpoint`, or None when
    the log does not say (the first batch starts at the source's initial offsets, not logged)."""
    if batch_id < 1:
        return None
    start, end = (_logged(os.path.join(checkpoint, "offsets", str(n))) for n in (batch_id - 1, batch_id))
    return (start, end) if start is not None and end is not None else None


def batch_end(checkpoint: str, batch_id: int) -> Offsets | None:
    """Where batch `batch_id` of the query checkpointed at `checkpoint` ended (None: not logged)."""
    return _logged(os.path.join(checkpoint, "offsets", str(batch_id)))


def _logged(path: str) -> Offsets | None:
    try:
        with open(path, encoding="utf-8") as log:
            return parse_offsets(log.read())
    except (OSError, UnicodeDecodeError):
        return None
