"""A bounded first-in first-out store of Kafka records on local disk: what a receptor agent keeps
while its broker is unreachable (edge.outbox forwards it, in order, once the broker is back), and
what a node's parts wait in for its constrained uplink (dsp.runtime.uplink, a spool per priority).

One append-only file of records and a small file holding the position of the first record not
yet forwarded; both go once everything is forwarded. A spool left by an agent that stopped is
taken up by the next one on the same directory. When a record would take the spool past its
bound it is refused and counted: the oldest records are the last to be dropped (they are the
ones a gap would hurt most, and what is kept stays one unbroken run).
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass

_HEADER = struct.Struct("<IIIIq")   # lengths of topic, key, value, headers (JSON); timestamp ms


@dataclass(frozen=True)
class SpooledRecord:
    topic: str
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]
    timestamp_ms: int     # when it was first sent: kept, so the broker's time is the original one

    def encode(self) -> bytes:
        topic = self.topic.encode()
        headers = json.dumps([[name, value.decode("latin-1")] for name, value in self.headers]).encode()
        return (_HEADER.pack(len(topic), len(self.key), len(self.value), len(headers), self.timestamp_ms)
                + topic + self.key + self.value + headers)


READ_BYTES = 4 * 1024 * 1024   # what `head` reads at once


def _size(buffer: bytes, at: int) -> int:
    """The length of the record at `at`, header included."""
    return _HEADER.size + sum(_HEADER.unpack_from(buffer, at)[:4])


def _decode(buffer: bytes, at: int) -> tuple[SpooledRecord, int]:
    """The record at `at` and where the next one starts."""
    topic_len, key_len, value_len, headers_len, timestamp_ms = _HEADER.unpack_from(buffer, at)
    at += _HEADER.size
    topic = buffer[at:at + topic_len].decode()
    at += topic_len
    key = buffer[at:at + key_len]
    at += key_len
    value = buffer[at:at + value_len]
    at += value_len
    headers = [(name, value.encode("latin-1")) for name, value in json.loads(buffer[at:at + headers_len])]
    return SpooledRecord(topic, key, value, headers, timestamp_ms), at + headers_len


class Spool:
    def __init__(self, directory: str, max_bytes: int) -> None:
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, "spool.bin")
        self.position_path = os.path.join(directory, "spool.pos")
        self.max_bytes = max_bytes
        self.dropped = 0

    def _position(self) -> int:
        try:
            with open(self.position_path) as fh:
                return int(fh.read().strip() or 0)
        except FileNotFoundError:
            return 0

    def pending_bytes(self) -> int:
        """Bytes of records not forwarded yet (0: empty)."""
        try:
            return os.path.getsize(self.path) - self._position()
        except FileNotFoundError:
            return 0

    def put(self, record: SpooledRecord) -> bool:
        """Append `record`; False (and counted in `dropped`) when it would exceed the bound."""
        data = record.encode()
        if self.pending_bytes() + len(data) > self.max_bytes:
            self.dropped += 1
            return False
        with open(self.path, "ab") as fh:
            fh.write(data)
        return True

    def head(self, max_records: int) -> tuple[list[SpooledRecord], list[int]]:
        """Up to `max_records` oldest records not forwarded, and for each the position after it
        (what `advance` takes once it and those before it are forwarded)."""
        start = self._position()
        try:
            with open(self.path, "rb") as fh:
                fh.seek(start)
                buffer = fh.read(READ_BYTES)
                if len(buffer) == READ_BYTES and _size(buffer, 0) > len(buffer):   # one record larger than that
                    buffer += fh.read(_size(buffer, 0) - len(buffer))
        except FileNotFoundError:
            return [], []
        records, ends, at = [], [], 0
        while at + _HEADER.size <= len(buffer) and at + _size(buffer, at) <= len(buffer) and len(records) < max_records:
            record, at = _decode(buffer, at)
            records.append(record)
            ends.append(start + at)
        return records, ends

    def advance(self, end: int) -> None:
        """Everything before position `end` is forwarded; an empty spool leaves no files."""
        if end >= os.path.getsize(self.path):
            os.remove(self.path)
            if os.path.exists(self.position_path):
                os.remove(self.position_path)
            return
        tmp = self.position_path + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(str(end))
        os.replace(tmp, self.position_path)
