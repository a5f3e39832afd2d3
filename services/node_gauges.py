"""A node's statistics in the MDR: what each batch a part emitted adds (counted once per batch
id), and the gauges it puts every second (input rate, lag, failed parts, archive and uplink use,
when its reader last left records out) with a sample of each for the dashboard's history."""

from __future__ import annotations

import logging

from dsp.runtime.shared import SharedRuntime
from dsp.status import BatchHook, BatchReport
from mdr.repository import MDR, now_ms
from services.metrics import NodeMetrics

log = logging.getLogger("hifi.node")

HISTORY_FIELDS = ("rows_in", "rows_out", "dead", "input_rate", "lag_ms")   # sampled every second for the dashboard


class NodeGauges:
    def __init__(self, node_id: str, edge: bool, mdr: MDR, dsp: SharedRuntime, metrics: NodeMetrics) -> None:
        self.node_id, self.edge, self.mdr, self.dsp, self.metrics = node_id, edge, mdr, dsp, metrics
        self._max_event_ms: int | None = None   # the newest event time a part of a parent emitted
        self._triaged_seen: int | None = None   # the MDR's `triaged` at the last round (None: none yet)

    def counting(self, query_id: str) -> BatchHook:
        """What a part's batch adds: its metrics, its rows counted once per batch id, and (above
        the edges) how far event time has come."""
        def on_batch(report: BatchReport) -> None:
            self.metrics.observe_batch(query_id, report)
            self.mdr.add_counts(self.node_id, query_id, report.batch_id, {"rows_out": report.rows_out})
            if report.max_event_ms is not None and not self.edge:
                self._max_event_ms = max(self._max_event_ms or 0, report.max_event_ms)
        return on_batch

    def put(self) -> None:
        """One round of gauges (the node calls it every second): one read of its statistics, one
        write of the round (mdr put_round)."""
        stats = self.mdr.stats(self.node_id)   # the counts others add; the newest event time; triaged
        newest = self._max_event_ms or int(stats.get("max_event_ms", 0))
        queries = self.dsp.queries()
        failed = {q.query_id: {"status": q.status, "error": q.error, "restarts": q.restarts}
                  for q in queries if q.status == "failed"}
        gauges = {**self.dsp.progress(), "lag_ms": now_ms() - newest if newest else 0,
                  "running_queries": len(queries), "failed_parts": len(failed),
                  **self._archive_gauges(), **self._uplink_gauges()}
        triaged = int(stats.get("triaged", 0))   # records its raw reader left out (dsp.triage)
        if self._triaged_seen is not None and triaged > self._triaged_seen:
            gauges["triaged_at_ms"] = now_ms()
        self._triaged_seen = triaged
        now = {**stats, **gauges}
        self.mdr.put_round(self.node_id, failed, gauges, {key: now.get(key, 0.0) for key in HISTORY_FIELDS})

    def _archive_gauges(self) -> dict[str, float]:
        archived = self.dsp.archive.usage
        return {"archive_bytes": archived.bytes, "archive_batches": archived.batches,
                "archive_ms_per_batch": round(archived.ms_per_batch, 3),
                "archive_oldest_ms": self.dsp.archive.oldest_ms() or 0, "archive_failures": archived.failures,
                "archive_failed_from_ms": archived.failed_from_ms, "archive_failed_to_ms": archived.failed_to_ms}

    def _uplink_gauges(self) -> dict[str, float]:
        uplink = self.dsp.uplink
        if uplink is None:
            return {}
        return {"uplink_queued_bytes": sum(uplink.queued_bytes().values()),
                "uplink_sent_bytes": uplink.stats.sent_bytes, "uplink_dropped": uplink.stats.dropped}

