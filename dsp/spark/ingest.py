"""What an edge node's reader counts of its input, once per offset range (fenced in the MDR): read
cycles, readings, samples, duplicates, weak reads, per receptor."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pyarrow as pa

from dsp.spark.dead_letters import Refusal, send_dead_letters
from dsp.spark.lane_offsets import OffsetRange
from dsp.spark.worker_mdr import shared_mdr
from wire.codec import Histograms
from wire.intake import DUPLICATE


class IngestTally:
    """The data listener's bookkeeping for one offset range of a raw topic."""

    def __init__(self, partition: OffsetRange, weak_below: float = 0.0) -> None:
        self.partition = partition
        self.weak_below = weak_below
        self.duplicates = 0
        self.triaged = 0                              # records Data Triage left out undecoded
        self.samples = 0
        self.histograms: Histograms = {}             # the motes' newest, (receptor, quantity) -> counts
        self.sensor_batches = 0
        self.obeyed = 0                               # the newest sensor proxy settings the motes obeyed
        self.newest: dt.datetime | None = None        # the latest reading's event time
        self.dead: list[Refusal] = []
        # per receptor: readings, read cycles, weak readings (keyed by the id alone: a formatted key
        # and a timestamp per reading were a tenth of a reader's CPU by py-spy)
        self.reads: Counter[str] = Counter()
        self.cycles_of: Counter[str] = Counter()
        self.weak: Counter[str] = Counter()

    def add(self, table: pa.Table, valid_cycles: Counter[str]) -> None:
        """A chunk of decoded read cycles (wire.cycle_columns) and its valid cycles per receptor."""
        import pyarrow.compute as pc

        error = table.column("error")
        if error.null_count < len(error):   # refused rows: few, one at a time
            for row in table.filter(pc.is_valid(error)).select(["error", "offset", "payload"]).to_pylist():
                if row["error"].startswith(DUPLICATE):
                    self.duplicates += 1
                else:
                    self.dead.append(Refusal(row["offset"], row["error"], row["payload"] or b""))
        self.cycles_of.update(valid_cycles)
        # the three columns counted, filtered only if a row must go (a chunk's usual case: every
        # row a reading): filtering the whole table was most of the tally's time
        reads = table.select(["receptor_id", "read_strength", "ts"])
        tags = table.column("tag_id")
        if error.null_count < len(error) or tags.null_count:
            reads = reads.filter(pc.and_(pc.is_null(error), pc.is_valid(tags)))
        receptors = reads.column("receptor_id")
        self.reads.update(_counts(receptors))
        self.weak.update(_counts(pc.filter(receptors, pc.less(reads.column("read_strength"), self.weak_below))))
        newest = pc.max(reads.column("ts")).as_py()
        if newest is not None and (self.newest is None or newest > self.newest):
            self.newest = newest

    def add_samples(self, record, rows: list[tuple], problems: list[str]) -> None:
        """A sensor batch: its accepted samples counted, each refused one (or the record) dead-lettered."""
        self.samples += len(rows)
        whole = not rows and len(problems) == 1 and not problems[0].startswith("sample ")
        for i, problem in enumerate(problems):
            self.dead.append(Refusal(record.offset, problem, record.value or b"", -1 if whole else i))

    def add_mote_reports(self, record, found: Histograms, problems: list[str], obeyed: int) -> None:
        """What a sensor batch reports besides samples: the newest histogram of each mote's recent
        values kept, each refused one dead-lettered; the settings its motes obeyed."""
        self.sensor_batches += 1
        self.obeyed = max(self.obeyed, obeyed)
        self.histograms.update(found)
        for i, problem in enumerate(problems):
            self.dead.append(Refusal(record.offset, problem, record.value or b"", i, histogram=True))

    def flush(self, bootstrap: str, node: str, mdr_url: str) -> None:
        topic = self.partition.topic
        if self.dead:
            send_dead_letters(bootstrap, node, topic, self.partition.partition, self.dead)
        mdr = shared_mdr(mdr_url)
        counts = {"rows_in": self.good, "cycles_in": self.cycles, "duplicates": self.duplicates,
                  "samples_in": self.samples, "dead": len(self.dead), "triaged": self.triaged}
        mdr.add_range_counts(node, topic, self.partition.partition, self.partition.start, self.partition.end,
                             self.max_event_ms, counts, self.per_receptor)
        if self.histograms:
            mdr.put_histograms(node, self.histograms)
        if self.sensor_batches:
            mdr.put_obeyed(node, self.partition.partition, self.obeyed)

    @property
    def good(self) -> int:
        return sum(self.reads.values())

    @property
    def cycles(self) -> int:
        return sum(self.cycles_of.values())

    @property
    def max_event_ms(self) -> int:
        return int(self.newest.timestamp() * 1000) if self.newest is not None else 0

    @property
    def per_receptor(self) -> dict[str, int]:
        """"<receptor>:<reads|cycles|weak>" -> count, as the MDR keeps them."""
        return {f"{receptor}:{kind}": n for kind, counter in (("reads", self.reads), ("cycles", self.cycles_of),
                                                               ("weak", self.weak)) for receptor, n in counter.items()}


def _counts(column: pa.ChunkedArray) -> dict[str, int]:
    """How many rows each value of a column has."""
    import pyarrow.compute as pc

    return {pair["values"]: pair["counts"] for pair in pc.value_counts(column).to_pylist()}
