"""State that a sink transform keeps across micro-batches (adaptive smoothing, mote quality),
saved beside the query's checkpoint with the id of the batch that produced it.

Both the state before and after batch N are kept: Spark replays N after a failure that came
before N's fence (dsp.spark.kafka_sink), and the replay must start again from before N.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from typing import Any


class BatchState(ABC):
    """A sink transform's state: subclasses say how it becomes JSON (`dump`) and back (`load`)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._restored = False

    @abstractmethod
    def dump(self) -> Any:
        """The state as JSON-ready data."""

    @abstractmethod
    def load(self, data: Any) -> None:
        """Take the state back from what `dump` gave."""

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
