"""A node's archive: every micro-batch its readers took in (the raw input at an edge node, the
children's views above it), kept as Parquet under the node's state directory, so that a query
can be answered over the past (`hifi query --since`, dsp.runtime.history_feed) after the stream moved on.

Layout: `<state>/archive/<hour>/<reader>/<batch id>.parquet`, the hour (UTC, `2026-11-25T19`) the
node took the batch in (a reader of many topics, its whole batch, each row with its topic:
dsp.runtime.inputs.Reader.archive_keys), and per hour a file `order` with a line `<taken ms> <reader key> <batch id>`
per batch in the order the node's parts saw them (across its readers: a part reading two topics
must see them interleaved as it did live). A batch is archived inside its micro-batch, before its
fence: a batch Spark runs again after a failure overwrites its file, and its second line in
`order` is ignored. Hours older than the retention are deleted.

Once its hour has passed, an hour is compacted in the background: each reader's batches become
the row groups of one file, `<hour>/<reader>.parquet`, with `<reader>.index` (its batch ids in
row-group order) and the hour's `compacted` mark; the small files go. (3 600 batches of 50 rows:
2.7 s to compact; reading them back as row groups 0.26 s against 2.0 s as files.)

Why a file per micro-batch and not one Parquet writer per hour: a writer holds its row groups
in memory until it closes, so a crash would lose the hour; a file per batch is whole once renamed
and costs little (measured: a 2 k-row batch of readings alone, 0.7 ms and 15 KB; ~5 ms a batch
inside a running hierarchy, `hifi bench pipeline`, which moved its p50 by ~0.1-0.2 s of 5.7 s).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

log = logging.getLogger("hifi.archive")

DEFAULT_RETENTION_MS = 24 * 3_600_000
HOUR_MS = 3_600_000
HOUR_FORMAT = "%Y-%m-%dT%H"
ORDER = "order"
COMPACTED = "compacted"
SCRATCH = ".spark"   # where Spark's tasks write a batch before it is adopted


def hour_of(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime(HOUR_FORMAT)


def hour_start_ms(hour: str) -> int:
    return int(dt.datetime.strptime(hour, HOUR_FORMAT).replace(tzinfo=dt.UTC).timestamp() * 1000)


def file_name(reader_key: str) -> str:
    """A reader key as a directory name (keys hold `:` and `@`)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", reader_key)


def _batch_file(hour_folder: str, reader_key: str, batch_id: int) -> str:
    """A batch's file (or Spark's folder) in its hour."""
    return os.path.join(hour_folder, file_name(reader_key), f"{batch_id:012d}.parquet")


def _compacted_file(hour_folder: str, reader_key: str) -> str:
    """A reader's batches of a compacted hour, a row group each."""
    return os.path.join(hour_folder, file_name(reader_key) + ".parquet")


@dataclass
class ArchiveUsage:
    batches: int = 0          # archived since the node started
    bytes: int = 0
    write_s: float = 0.0      # time spent writing them
    failures: int = 0         # batches it could not write (the stream went on)
    failed_from_ms: int = 0   # the event times those batches spanned, first to last (0: none failed):
    failed_to_ms: int = 0     # a query over the past then says its answer may lack them

    def failed(self, span_ms: tuple[int, int]) -> None:
        """A batch of events in `span_ms` (first, last) could not be archived."""
        self.failures += 1
        first, last = span_ms
        self.failed_from_ms = min(self.failed_from_ms or first, first)
        self.failed_to_ms = max(self.failed_to_ms, last)

    @property
    def ms_per_batch(self) -> float:
        return self.write_s * 1000 / self.batches if self.batches else 0.0


class Archive:
    def __init__(self, root: str, retention_ms: int = DEFAULT_RETENTION_MS) -> None:
        self.root, self.retention_ms = root, retention_ms
        self.usage = ArchiveUsage()
        self._pruned_hour = ""
        # the reader folders of the current hour already made: a makedirs per batch and topic was
        # a third of archiving a small batch (py-spy, the default hierarchy)
        self._made: tuple[str, set[str]] = ("", set())
        self._lock = threading.Lock()   # compaction and pruning against reading an hour
        self._compacting = threading.Lock()   # one compaction at a time
        shutil.rmtree(os.path.join(root, SCRATCH), ignore_errors=True)   # what Spark wrote for a node that stopped

    def append(self, reader_key: str, batch_id: int, table: pa.Table, now_ms: int | None = None) -> None:
        """Archive one batch a reader took in (an empty one: nothing; nothing at all with no retention)."""
        if table.num_rows == 0 or self.retention_ms <= 0:
            return

        def write(path: str) -> int:
            pq.write_table(table, path + ".tmp")
            os.replace(path + ".tmp", path)   # whole or absent
            return os.path.getsize(path)

        self._store(reader_key, batch_id, now_ms, write)

    def adopt(self, reader_key: str, batch_id: int, written: str, now_ms: int | None = None) -> None:
        """Archive one batch whose rows Spark's tasks wrote as the Parquet folder `written` (read
        back as one table; dsp.spark.partials.write_by_topic): moved into place, as `append` does."""
        if self.retention_ms <= 0:
            shutil.rmtree(written, ignore_errors=True)
            return

        def move(path: str) -> int:
            shutil.rmtree(path, ignore_errors=True)   # a batch Spark ran again
            os.replace(written, path)
            return sum(os.path.getsize(os.path.join(path, name)) for name in os.listdir(path))

        self._store(reader_key, batch_id, now_ms, move)

    def scratch(self) -> str:
        """A new folder for Spark's tasks to write a batch in before it is adopted (outside every hour)."""
        return os.path.join(self.root, SCRATCH, uuid.uuid4().hex)

    def _store(self, reader_key: str, batch_id: int, now_ms: int | None, put: Callable[[str], int]) -> None:
        """`put` the batch where it goes (its file or folder in its hour's reader folder; its size
        back), then its line in the hour's order."""
        started = time.perf_counter()
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        hour = hour_of(now_ms)
        folder = os.path.join(self.root, hour, file_name(reader_key))
        if self._made[0] != hour:
            self._made = (hour, set())
        if folder not in self._made[1]:
            os.makedirs(folder, exist_ok=True)
            self._made[1].add(folder)
        size = put(_batch_file(os.path.join(self.root, hour), reader_key, batch_id))
        with open(os.path.join(self.root, hour, ORDER), "a", encoding="utf-8") as order:
            order.write(f"{now_ms} {reader_key} {batch_id}\n")
        self.usage.batches += 1
        self.usage.bytes += size
        self.usage.write_s += time.perf_counter() - started
        self._hourly(hour, now_ms)

    def _hourly(self, hour: str, now_ms: int) -> None:
        """Once an hour, on its first batch: the hours past the retention go, the closed ones are compacted."""
        if hour != self._pruned_hour:
            self._pruned_hour = hour
            self.prune(now_ms)
            threading.Thread(target=self.compact_closed, args=(hour,), name="archive-compact", daemon=True).start()

    def hours(self) -> list[str]:
        try:
            return sorted(h for h in os.listdir(self.root) if os.path.isfile(os.path.join(self.root, h, ORDER)))
        except FileNotFoundError:
            return []

    def batches(self, since_ms: int, readers: Iterable[str]) -> Iterator[tuple[str, pa.Table]]:
        """(reader key, table) of every batch of `readers` taken in from `since_ms` on, in the order
        the node took them (an hour at a time)."""
        wanted = set(readers)
        for hour in self.hours():
            if hour_start_ms(hour) + HOUR_MS <= since_ms:
                continue
            with self._lock:
                found = list(self._hour_batches(hour, since_ms, wanted))
            yield from found

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """No hour compacted or pruned meanwhile: the paths `stored` names stay while Spark reads them."""
        with self._compacting, self._lock:
            yield

    def stored(self, since_ms: int, readers: Iterable[str]) -> list[tuple[str, str | pa.Table]]:
        """Where the batches `batches` reads are, for Spark to read them (under `held`): (reader
        key, path) of each batch's file or folder, and of each reader's compacted file of an hour
        wanted whole; (reader key, table) of the row groups of a compacted hour wanted in part."""
        wanted, found = set(readers), []
        for hour in self.hours():
            folder = os.path.join(self.root, hour)
            if hour_start_ms(hour) + HOUR_MS <= since_ms:
                continue
            if os.path.exists(os.path.join(folder, COMPACTED)):
                if since_ms <= hour_start_ms(hour):   # every batch of the hour: each reader's whole file
                    found += [(key, path) for key in sorted(wanted)
                              if os.path.exists(path := _compacted_file(folder, key))]
                else:
                    found += list(self._hour_batches(hour, since_ms, wanted))
                continue
            found += [(key, path) for key, batch in self._ordered(folder, since_ms, wanted)
                      if os.path.exists(path := _batch_file(folder, key, batch))]
        return found

    @staticmethod
    def _ordered(folder: str, since_ms: int, wanted: set[str]) -> Iterator[tuple[str, int]]:
        """(reader key, batch id) of an hour's `wanted` batches taken from `since_ms` on, in order, each once."""
        seen: set[tuple[str, int]] = set()
        with open(os.path.join(folder, ORDER), encoding="utf-8") as order:
            lines = order.read().splitlines()
        for line in lines:
            taken, key, batch_text = line.split(" ")
            batch = int(batch_text)
            if int(taken) < since_ms or key not in wanted or (key, batch) in seen:
                continue
            seen.add((key, batch))
            yield key, batch

    def _hour_batches(self, hour: str, since_ms: int, wanted: set[str]) -> Iterator[tuple[str, pa.Table]]:
        folder = os.path.join(self.root, hour)
        compacted = os.path.exists(os.path.join(folder, COMPACTED))
        groups: dict[str, tuple[pq.ParquetFile, dict[int, int]]] = {}
        for key, batch in self._ordered(folder, since_ms, wanted):
            if compacted:
                if key not in groups:
                    groups[key] = self._compacted(folder, key)
                parquet, index = groups[key]
                if parquet is not None and batch in index:
                    yield key, parquet.read_row_group(index[batch])
                continue
            path = _batch_file(folder, key, batch)
            if os.path.exists(path):   # a line written, its batch then failed and never ran again
                yield key, pq.read_table(path)

    @staticmethod
    def _compacted(folder: str, key: str) -> tuple[pq.ParquetFile | None, dict[int, int]]:
        """A reader's compacted file of an hour and its batch id -> row group (None, {}: none)."""
        path = _compacted_file(folder, key)
        if not os.path.exists(path):
            return None, {}
        with open(os.path.join(folder, file_name(key) + ".index"), encoding="utf-8") as fh:
            order = json.load(fh)
        return pq.ParquetFile(path), {batch: group for group, batch in enumerate(order)}

    def compact_closed(self, current_hour: str) -> list[str]:
        """Compact every hour before `current_hour` not compacted yet; the hours compacted."""
        done = []
        with self._compacting:
            for hour in self.hours():
                if hour < current_hour and not os.path.exists(os.path.join(self.root, hour, COMPACTED)):
                    try:
                        self.compact(hour)
                        done.append(hour)
                    except Exception:  # noqa: BLE001 - the small files stay, and are read as they are
                        log.exception("archive: compacting %s failed", hour)
        return done

    def compact(self, hour: str) -> None:
        """Each reader's batches of `hour` into the row groups of one file (see the module)."""
        folder = os.path.join(self.root, hour)
        readers = [name for name in os.listdir(folder) if os.path.isdir(os.path.join(folder, name))]
        for reader in readers:
            files = sorted(n for n in os.listdir(os.path.join(folder, reader)) if n.endswith(".parquet"))
            order: list[int] = []
            writer, schema = None, None
            try:
                for name in files:
                    table = pq.read_table(os.path.join(folder, reader, name))
                    if writer is None:
                        schema = table.schema
                        writer = pq.ParquetWriter(os.path.join(folder, reader + ".parquet.tmp"), schema)
                    writer.write_table(table.cast(schema), row_group_size=max(1, table.num_rows))   # a batch a group
                    order.append(int(name.removesuffix(".parquet")))
            finally:
                if writer is not None:
                    writer.close()
            if writer is not None:
                os.replace(os.path.join(folder, reader + ".parquet.tmp"), os.path.join(folder, reader + ".parquet"))
            with open(os.path.join(folder, reader + ".index"), "w", encoding="utf-8") as fh:
                json.dump(order, fh)
        with self._lock:   # from here on the hour is read from the compacted files
            open(os.path.join(folder, COMPACTED), "w").close()
            for reader in readers:
                shutil.rmtree(os.path.join(folder, reader), ignore_errors=True)

    def oldest_ms(self) -> int | None:
        """When the oldest batch still archived was taken in (None: nothing archived)."""
        for hour in self.hours():
            with open(os.path.join(self.root, hour, ORDER), encoding="utf-8") as order:
                first = order.readline()
            if first:
                return int(first.split(" ", 1)[0])
        return None

    def prune(self, now_ms: int) -> list[str]:
        """Delete the hours wholly older than the retention; the hours deleted."""
        gone = [h for h in self.hours() if hour_start_ms(h) + HOUR_MS <= now_ms - self.retention_ms]
        with self._lock:
            for hour in gone:
                shutil.rmtree(os.path.join(self.root, hour), ignore_errors=True)
        return gone

    def size_bytes(self) -> int:
        return sum(os.path.getsize(os.path.join(folder, name)) for folder, _, names in os.walk(self.root)
                   for name in names)


def exact_rows(batch: pa.Table) -> pa.Table:
    """An archived raw batch: its readings decoded exactly (weight 1, a tag, no error)."""
    if "weight" not in batch.column_names:
        return batch.slice(0, 0)
    return batch.filter(pc.and_(pc.equal(pc.fill_null(batch["weight"], 1), 1),
                                pc.and_(pc.is_valid(batch["tag_id"]), pc.is_null(batch["error"]))))


def sampled_ranges(batch: pa.Table) -> list[tuple[int, int, int]]:
    """(partition, from offset, to offset) of each range an archived raw batch's triage rows name
    (dsp.triage): with `exact_rows`, every reading the batch stood for (those records are still in
    the raw topic)."""
    if "weight" not in batch.column_names:
        return []
    named = batch.filter(pc.equal(pc.fill_null(batch["weight"], 1), 0))
    return list(zip(named["partition"].to_pylist(), named["offset"].to_pylist(), named["triaged_to"].to_pylist(),
                    strict=True))
