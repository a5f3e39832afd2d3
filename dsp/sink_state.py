"""State that a sink transform keeps across micro-batches (adaptive smoothing, mote quality),
saved beside the query's checkpoint with the id of the batch that produced it.

Both the state before and after batch N are kept: Spark replays N after a failure that came
before N's fence (dsp.kafka_sink), and the replay must start again from before N.
"""

from __future__ import annotations

import json
import os
from typing import Any


class BatchState:
    def __init__(self, path: str) -> None:
        self.path = path
        self._restored = False

    def dump(self) -> Any:
        raise NotImplementedError

    def load(self, data: Any) -> None:
        raise NotImplementedError

    def begin(self, batch_id: int) -> Any:
        """Restore (once, after a start) what batch `batch_id` starts from; return it, to be
        saved with the batch's result by `commit`."""
        if not self._restored:
            self._restored = True
            try:
                with open(self.path) as fh:
                    saved = json.load(fh)
                self.load(saved["before"] if saved["batch"] == batch_id else saved["after"])
            except FileNotFoundError:
                pass
        return self.dump()

    def commit(self, batch_id: int, before: Any) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump({"batch": batch_id, "before": before, "after": self.dump()}, fh)
        os.replace(tmp, self.path)
