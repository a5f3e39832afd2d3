"""How the CLI's listing commands print their rows (`--format`): an aligned table for people, JSON
lines or CSV for programs (jq, a spreadsheet, kcat-style pipes).

One convention for times everywhere: a table shows the local time with its zone (the date too
when it is not today); JSON and CSV give ISO 8601 with the offset. Pure functions over plain rows.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime

FORMATS = ("table", "json", "csv")


def when(ms: int | float | None) -> datetime | None:
    """An epoch-milliseconds time as the rows carry it (None or 0: never)."""
    return datetime.fromtimestamp(ms / 1000, UTC) if ms else None


def clock(moment: datetime, today: datetime | None = None, millis: bool = False) -> str:
    """A time as a table shows it: local, with its zone; the date too when it is not today's (a
    naive time is UTC's, as the rows' times are); `millis`: to the millisecond.

    >>> noon = datetime(2026, 12, 3, 12, 0, 5, tzinfo=UTC)
    >>> [len(clock(noon, today=day).split()) for day in (noon, noon.replace(day=5))]   # time, zone; date too
    [2, 3]
    """
    local = utc(moment).astimezone()
    today = (today or datetime.now(UTC)).astimezone()
    time_of_day = local.strftime("%H:%M:%S.%f")[:-3] if millis else local.strftime("%H:%M:%S")
    day = "" if local.date() == today.date() else local.strftime("%Y-%m-%d ")
    return f"{day}{time_of_day} {local.strftime('%Z')}"


def span(start: datetime, end: datetime, today: datetime | None = None) -> str:
    """A window as a line shows it: start-end, local, the zone once (the date when not today's).

    >>> noon = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
    >>> span(noon, noon.replace(second=2), today=noon).split()[0][-9:]
    '-12:00:02'
    """
    first, last = clock(start, today).rsplit(" ", 1)[0], clock(end, today)
    return f"{first}-{last.split(' ')[-2]} {last.split(' ')[-1]}"


def shown(value: object) -> str:
    """A value as a line shows it: a float to four significant digits, a time by `clock`.

    >>> shown(40.613899999999994), shown(12.0), shown(7), shown(None)
    ('40.61', '12', '7', 'NULL')
    """
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, datetime):
        return clock(value, millis=True)
    return "NULL" if value is None else str(value)


# What a result line leaves out of a row: its window and change bounds, shown apart (or not at all)
NOT_SHOWN = ("window_start", "window_end", "change", "since", "held_seconds", "__ts", "_emitted_ms")


def fields_text(row: dict) -> str:
    """A row's other columns as a result line shows them: `name=value`, two spaces apart.

    >>> fields_text({"window_start": 1, "location": "dock", "tags": 11.0, "change": "start"})
    'location=dock  tags=11'
    """
    return "  ".join(f"{k}={shown(v)}" for k, v in row.items() if k not in NOT_SHOWN)


def utc(moment: datetime) -> datetime:
    """`moment` with its zone (a naive time is UTC's)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def iso(moment: datetime) -> str:
    """ISO 8601 with the offset, to the millisecond, as JSON and CSV give a time.

    >>> iso(datetime(2026, 12, 3, 12, 0, 5))
    '2026-12-03T12:00:05.000+00:00'
    """
    return utc(moment).isoformat(timespec="milliseconds")


def key(header: str) -> str:
    """A column's name as JSON and CSV give it.

    >>> key("last heartbeat"), key("rows/s"), key("archived KB")
    ('last_heartbeat', 'rows_per_s', 'archived_kb')
    """
    return re.sub(r"[^a-z0-9]+", "_", header.lower().replace("/", " per ")).strip("_")


def _text(value: object) -> str:
    if value is None:
        return "-"
    return clock(value) if isinstance(value, datetime) else str(value)


def _plain(value: object) -> object:
    return iso(value) if isinstance(value, datetime) else value


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Aligned columns under a rule.

    >>> print(table(["a", "bb"], [[1, None], ["xyz", 2]]))
    a    bb
    ---  --
    1    -
    xyz  2
    """
    cells = [[str(c) for c in headers]] + [[_text(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render(headers: Sequence[str], rows: Sequence[Sequence[object]], form: str = "table") -> str:
    """`rows` under `headers` in `form` (one of FORMATS).

    >>> moment = datetime(2026, 12, 3, 12, 0, 5, tzinfo=UTC)
    >>> print(render(["node", "up since", "starts"], [["door1", moment, 2]], "json"))
    {"node": "door1", "up_since": "2026-12-03T12:00:05.000+00:00", "starts": 2}
    >>> print(render(["node", "up since"], [["door1", None]], "csv"))
    node,up_since
    door1,
    """
    if form == "json":
        return "\n".join(json.dumps({key(h): _plain(v) for h, v in zip(headers, row, strict=True)}) for row in rows)
    if form == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([key(h) for h in headers])
        writer.writerows([["" if v is None else _plain(v) for v in row] for row in rows])
        return out.getvalue().rstrip("\n")
    return table(headers, rows)
