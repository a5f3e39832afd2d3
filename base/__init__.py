"""What the planner (glue) and the runtime (dsp) both build on: the plan form (`plan.py`), a
query's part on one node (`part_spec.py`), and the pure stream operators whose meaning both use
(adaptive smoothing `smurf.py`, event patterns `events.py`, faulty-mote detection
`mote_quality.py`, the window join's algebra `window_join.py`). Pure: no I/O."""
