"""The MDR as a Spark Python worker reaches it: one connection per URL and process, made when first
needed (a query's source runner must connect back to Spark within 10 s of starting)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mdr.repository import MDR

_mdrs: dict[str, MDR] = {}


def shared_mdr(url: str) -> MDR:
    # Imported here: every query's source runner imports this module, and must connect back to
    # Spark within 10 s (dsp/spark/python_worker.sh); only the ingest statistics need redis.
    from mdr.repository import MDR

    if url not in _mdrs:
        _mdrs[url] = MDR.connect(url)
    return _mdrs[url]
