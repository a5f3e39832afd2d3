"""What a faulty sensor mote reports instead of the truth. Pure.

  fail-stop  nothing (silence)
  stuck      the values it read when the fault began, repeated
  spike      the true value far off (±15-40 °C) on temperature
  battery    voltage sags toward 2.0 V while temperature climbs past 100 °C (what the Intel
             Lab motes did as their batteries died), `progress` in (0, 1] through the fault
"""

from __future__ import annotations

import random

FAULT_KINDS = ("fail-stop", "stuck", "spike", "battery")


def in_span(t_ms: int, start_ms: int, end_ms: int | None) -> bool:
    """Whether a fault from `start_ms` to `end_ms` (None: the run's end) is on at `t_ms`."""
    return start_ms <= t_ms and (end_ms is None or t_ms < end_ms)


def faulty_values(kind: str, true: dict[str, float], at_start: dict[str, float], progress: float,
                  rng: random.Random) -> dict[str, float] | None:
    """The values a mote with fault `kind` reports; None for silence."""
    if kind == "fail-stop":
        return None
    values = dict(true)
    if kind == "stuck":
        values.update({k: v for k, v in at_start.items() if k != "voltage"})
    elif kind == "spike":
        values["temperature"] = round(true["temperature"] + rng.choice((-1, 1)) * rng.uniform(15, 40), 2)
    elif kind == "battery":
        values["voltage"] = round(true["voltage"] - 0.75 * progress, 4)
        values["temperature"] = round(true["temperature"] + 100.0 * progress ** 0.5, 2)
    else:
        raise ValueError(f"unknown fault kind {kind!r} (known: {', '.join(FAULT_KINDS)})")
    return values
