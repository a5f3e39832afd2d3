"""What Spark's event log (HIFI_SPARK_EVENT_LOG, dsp.spark.session.event_log) says an
application's batches did: the jobs and tasks of its batches (not the warm-up job every session
runs as it starts), the records its Kafka scans read, the rows those records became, and the rows
its jobs returned to the driver. Plain functions over the log's JSON lines, so a test or a
benchmark judges what Spark computed from Spark's own account of it, not from HiFi's.

Row counts come from the SQL plans' metrics (`number of output rows`, summed over the tasks'
updates, each metric once: a cached batch's plan appears under every job that reads it)."""

from __future__ import annotations

import glob
import json
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from dsp.spark.session import WARM_UP

ROWS = "number of output rows"


@dataclass
class ApplicationWork:
    """One application's batch jobs, from its event log."""

    name: str = ""
    jobs: int = 0
    tasks: int = 0
    executors: set[str] = field(default_factory=set)   # where the tasks ran
    kafka_records: int = 0    # records Spark's Kafka scans read
    readings: int = 0         # rows the records' readings became (the plans' Generate: one a reading)
    rows_to_driver: int = 0   # rows the batch jobs' plans returned (a write's rows stay where written)


@dataclass
class _Plan:
    root: list[int] = field(default_factory=list)      # its root's row metric (the rows it returns)
    kafka: list[int] = field(default_factory=list)
    generate: list[int] = field(default_factory=list)
    writes: bool = False


def application_work(lines: Iterable[str]) -> ApplicationWork:
    """Sum one application's event log (the warm-up job and its tasks left out).

    >>> kafka = {"nodeName": "Scan KafkaRelation(...)", "metrics": [{"name": ROWS, "accumulatorId": 3}]}
    >>> generate = {"nodeName": "Generate", "metrics": [{"name": ROWS, "accumulatorId": 2}], "children": [kafka]}
    >>> plan = {"nodeName": "HashAggregate", "metrics": [{"name": ROWS, "accumulatorId": 1}], "children": [generate]}
    >>> def task(stage, updates):
    ...     return json.dumps({"Event": "SparkListenerTaskEnd", "Stage ID": stage, "Task Info": {
    ...         "Executor ID": "1", "Accumulables": [{"ID": i, "Update": n} for i, n in updates.items()]}})
    >>> log = [
    ...     '{"Event": "SparkListenerApplicationStart", "App Name": "hifi-door"}',
    ...     '{"Event": "SparkListenerJobStart", "Job ID": 0, "Stage IDs": [0],'
    ...     ' "Properties": {"spark.job.description": "hifi: warm-up"}}', task(0, {}),
    ...     json.dumps({"Event": "SparkListenerSQLExecutionStart", "executionId": 7, "sparkPlanInfo": plan}),
    ...     '{"Event": "SparkListenerJobStart", "Job ID": 1, "Stage IDs": [1, 2],'
    ...     ' "Properties": {"spark.sql.execution.id": "7"}}',
    ...     task(1, {3: 40, 2: 400}), task(2, {1: 6}),
    ... ]
    >>> work = application_work(log)
    >>> (work.name, work.jobs, work.tasks, work.kafka_records, work.readings, work.rows_to_driver, work.executors)
    ('hifi-door', 1, 2, 40, 400, 6, {'1'})
    """
    work = ApplicationWork()
    plans: dict[int, _Plan] = {}
    returned: set[int] = set()     # the root metrics of the plans a batch job ran
    stages: set[int] = set()
    updates: Counter[int] = Counter()
    for event in _events(lines):
        kind = event.get("Event", "")
        if kind == "SparkListenerApplicationStart":
            work.name = event.get("App Name", "")
        elif kind.endswith("SQLExecutionStart"):
            plans[int(event.get("executionId", -1))] = _plan_of(event.get("sparkPlanInfo") or {})
        elif kind == "SparkListenerJobStart":
            properties = event.get("Properties") or {}
            if properties.get("spark.job.description") == WARM_UP:
                continue
            work.jobs += 1
            stages.update(event.get("Stage IDs", []))
            plan = plans.get(int(properties.get("spark.sql.execution.id", -1)))
            if plan is not None and not plan.writes:
                returned.update(plan.root)
        elif kind == "SparkListenerTaskEnd" and event.get("Stage ID") in stages:
            info = event.get("Task Info") or {}
            work.tasks += 1
            work.executors.add(str(info.get("Executor ID", "")))
            for metric in info.get("Accumulables", []):
                if isinstance(metric.get("Update"), int | str) and str(metric["Update"]).isdigit():
                    updates[int(metric["ID"])] += int(metric["Update"])
    every = plans.values()
    work.kafka_records = sum(updates[i] for i in {i for p in every for i in p.kafka})
    work.readings = sum(updates[i] for i in {i for p in every for i in p.generate})
    work.rows_to_driver = sum(updates[i] for i in returned)
    return work


def _events(lines: Iterable[str]) -> Iterable[dict]:
    for line in lines:
        try:
            yield json.loads(line)
        except ValueError:   # a running application's last line, half written
            continue


def _plan_of(node: dict) -> _Plan:
    plan = _Plan(writes="Write" in node.get("nodeName", "") or "Command" in node.get("nodeName", ""))
    pending = [(node, True)]
    while pending:
        current, at_root = pending.pop()
        rows = [m["accumulatorId"] for m in current.get("metrics", []) if m.get("name") == ROWS]
        name = current.get("nodeName", "")
        if "Kafka" in name or "KafkaRelation" in current.get("simpleString", ""):
            plan.kafka += rows
        elif name == "Generate":
            plan.generate += rows
        if at_root and rows:
            plan.root = rows
        pending += [(child, at_root and not rows) for child in current.get("children", [])]
    return plan


def applications(folder: str, name: str) -> list[ApplicationWork]:
    """The work of every application named `name` whose event log is in `folder`, oldest first
    (a finished application's file, or a running or killed one's `.inprogress`)."""
    found = []
    for path in sorted(glob.glob(os.path.join(folder, "*")), key=os.path.getmtime):
        with open(path, errors="replace") as log:
            work = application_work(line for line in log if line.strip())
        if work.name == name:
            found.append(work)
    return found
