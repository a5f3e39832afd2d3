"""A node's runtime state between micro-batches: what makes each batch count exactly once.

Four things, in the node's state directory (dsp.runtime.shared runs the batches):
  fences     per stream (dsp.runtime.inputs.stream_key) and Spark query (dsp.runtime.process_stream, by its
             checkpoint's id), the last batch id whose effects are saved: a batch Spark replays at or
             below it was already applied and is skipped
  positions  per stream, where it has read each partition to ("topic:partition" -> offset): its
             next batch starts there, whatever batches of the process's stream it did not see
  parts      every part's state after that batch (its operators, output sequence, last marker, run)
  intent     the batch about to run, written before it starts (a few bytes on tmpfs): after a
             crash, the node waits for Spark's replay of exactly that batch before another
Fences and parts are one pickle, written whole and renamed into place after each batch, so they
never disagree; the node goes back to a part's state at the last save (a batch that failed midway
is undone by it: `at_last_save`).
"""

from __future__ import annotations

import importlib
import io
import logging
import os
import pickle
from collections.abc import Mapping
from dataclasses import dataclass, field

log = logging.getLogger("hifi.dsp")

STATE_FILE = "shared.state"
INTENT_FILE = "shared.intent"


@dataclass
class _Saved:   # its name and fields are the pickle's layout: a node restarts on what it saved
    fences: dict[str, int] = field(default_factory=dict)
    parts: dict[str, tuple] = field(default_factory=dict)   # query id -> Part.saved()
    positions: dict[str, dict[str, int]] = field(default_factory=dict)   # stream -> its read offsets


class BatchCheckpoint:
    def __init__(self, state_dir: str, node_id: str) -> None:
        self.node_id = node_id
        self.state_path = os.path.join(state_dir, STATE_FILE)
        self.intent_path = os.path.join(state_dir, INTENT_FILE)
        self._snapshot = b""     # the last save's bytes (what `at_last_save` gives back)
        self._saved = self._load()

    @property
    def fences(self) -> dict[str, int]:
        """Stream key -> the last batch id whose effects are saved (changed in place, saved by `save`)."""
        return self._saved.fences

    @property
    def positions(self) -> dict[str, dict[str, int]]:
        """Stream key -> where it has read each partition to (changed in place, saved by `save`)."""
        return self._saved.positions

    def saved_part(self, query_id: str) -> tuple | None:
        """The part's state as the node last saved it before it (re)started, or None."""
        return self._saved.parts.get(query_id)

    def at_last_save(self) -> dict[str, tuple]:
        """Every part's state at the last save (query id -> Part.saved()): what a failed batch goes back to."""
        return _Unpickler(self._snapshot).load().parts if self._snapshot else {}

    def intend(self, key: str, batch_id: int) -> None:
        """Record the batch about to run."""
        tmp = self.intent_path + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(f"{batch_id} {key}")
        os.replace(tmp, self.intent_path)

    def unfinished(self) -> tuple[str, int] | None:
        """The (stream, batch id) that was running when the node last stopped, if its effects were not saved."""
        try:
            with open(self.intent_path) as fh:
                batch_id, key = fh.read().split(" ", 1)
        except (FileNotFoundError, ValueError):
            return None
        return (key, int(batch_id)) if int(batch_id) > self.fences.get(key, -1) else None

    def save(self, parts: Mapping[str, tuple]) -> None:
        """The fences as they are and every part's state (query id -> Part.saved()), atomically."""
        self._saved.parts = dict(parts)
        self._snapshot = pickle.dumps(self._saved, protocol=pickle.HIGHEST_PROTOCOL)
        tmp = self.state_path + ".tmp"
        try:
            fh = open(tmp, "wb")
        except FileNotFoundError:   # its directory made at the first save (not every batch's: py-spy)
            os.makedirs(os.path.dirname(self.state_path), exist_ok=True)
            fh = open(tmp, "wb")
        with fh:
            fh.write(self._snapshot)
        os.replace(tmp, self.state_path)

    def _load(self) -> _Saved:
        try:
            with open(self.state_path, "rb") as fh:
                snapshot = fh.read()
            saved = _Unpickler(snapshot).load()
            saved.__dict__.setdefault("positions", {})   # saved before streams kept positions
            self._snapshot = snapshot
            return saved
        except FileNotFoundError:
            return _Saved()
        except Exception:  # noqa: BLE001 - unreadable state: start over (the readers resume from offsets)
            log.exception("node %s: saved runtime state unreadable; starting without it", self.node_id)
            return _Saved()


# Modules that moved since a state may have been saved, and the parts' evaluators pickled their
# classes under the old names: the plan form and the pure operators went from dsp to base (issue
# 38); dsp's files went into wings (operators, spark, runtime), the evaluator split by family.
_MOVED = {f"dsp.{name}": f"base.{name}" for name in ("plan", "part_spec", "smurf", "events", "mote_quality",
                                                      "window_join")}
_MOVED.update({f"dsp.{name}": f"dsp.{wing}.{name}" for wing, names in (
    ("operators", ("topic_batch",)),
    ("spark", ("compiler", "kafka_source", "kafka_sink", "offset_log", "manager", "smoothing", "sink_state",
               "progress")),
    ("runtime", ("shared", "parts", "process_stream", "stream_batches", "form_batches", "lane_fetch", "control_first",
                 "archive", "history_feed", "uplink", "unrepeated", "faults", "bounds"))) for name in names})
_MOVED.update({"dsp.arrow_exprs": "dsp.operators.expressions", "dsp.node_inputs": "dsp.runtime.inputs"})
_ENGINE_FAMILIES = ("core", "source", "rowwise", "window_join", "tree", "aggregate", "pattern", "quality", "changes",
                    "build")   # dsp.engine, split: a class is looked up in each


class _Unpickler(pickle.Unpickler):
    """State saved before this module held it named its layout `dsp.shared._Saved` or
    `dsp.batch_checkpoint._Saved`; state saved before a module moved names its classes by their old
    modules (_MOVED, and dsp.engine's families)."""

    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))

    def find_class(self, module: str, name: str):
        if name == "_Saved" and module in ("dsp.shared", "dsp.batch_checkpoint"):
            return _Saved
        if module == "dsp.engine":
            for family in _ENGINE_FAMILIES:
                found = importlib.import_module(f"dsp.operators.{family}")
                if name in vars(found):
                    return getattr(found, name)
        return super().find_class(_MOVED.get(module, module), name)
