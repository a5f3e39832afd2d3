"""EMIT CHANGES (base.changes): a window's rows only where they differ from the key's last."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from base.changes import KeyChanges
from base.plan import Changes
from base.plan_schema import output_columns
from dsp.operators.expressions import arrow_schema, arrow_type, epoch_ms, timestamps
from dsp.operators.rowwise import RowwiseOp


@dataclass
class ChangesOp(RowwiseOp):
    """EMIT CHANGES (base.changes): its child's windows' rows as each key's starts and ends, once
    the child's bound closes their windows. Its bound is its child's: a row still to come is for
    a window not closed yet (a start) or the one after a key's last (an end), both after it."""

    plan: Changes

    def __post_init__(self) -> None:
        self.columns = output_columns(self.plan)
        self.schema = arrow_schema(self.columns)
        self.tracker = KeyChanges(self.plan.keys, self.plan.slide_ms)

    def apply(self, rows: pa.Table | None) -> pa.Table | None:
        if rows is None:
            return None
        given = rows.drop_columns([c for c in rows.column_names if c not in dict(self.child.columns)]).to_pylist()
        for row, start, end in zip(given, epoch_ms(rows["window_start"]).to_pylist(),
                                   epoch_ms(rows["window_end"]).to_pylist(), strict=True):
            row["window_start"], row["window_end"] = start, end
        changed = self.tracker.feed(given, self.child.bound())
        arrays = [timestamps([r[name] for r in changed]) if name in MS_COLUMNS else
                  pa.array([r[name] for r in changed], arrow_type(kind)) for name, kind in self.columns]
        return pa.Table.from_arrays(arrays, schema=self.schema)


MS_COLUMNS = ("window_start", "window_end", "since")   # epoch ms in base.changes' rows
