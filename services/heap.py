"""The Python heap of a process running nodes, settled once they have started.

A started process holds a few hundred thousand objects that live as long as it does (Spark's and
gRPC's modules, the plans, the clients), and every full collection of the garbage collector walks
them all: in the 32 doors under one warehouse in one `hifi up` (232 000 objects after start), two
full collections a minute paused the lanes' thread 164 ms each (2026-11-28, gc.callbacks over 60 s of
steady state). Moved out of the collector's generations once the nodes are up (`gc.freeze`, after a
collection so that no garbage is kept), the one full collection of the same minute took 15 ms.
Objects made later (batches, state) are collected as before; `release` gives the settled ones back
to the collector when the nodes stop (a test process starts many hierarchies one after another).
"""

from __future__ import annotations

import gc


def settle() -> None:
    """Collect, then keep what is left out of every later collection."""
    gc.collect()
    gc.freeze()


def release() -> None:
    """The settled objects back in the collector's care (those that died since are collected)."""
    gc.unfreeze()
