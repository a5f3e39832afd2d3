"""The process's one cache of Kafka clients: a producer and a consumer per broker, shared by its
nodes, and the range readers' consumers per owner (wire.kafka.ranges); a closed client is replaced,
and all of a broker's are dropped together when it goes."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from kafka import KafkaConsumer, KafkaProducer

from wire.kafka import admin
from wire.kafka.consumers import make_consumer
from wire.kafka.producers import forget_topics
from wire.kafka.rd_producer import RdProducer

# One client of each kind per bootstrap per process: Spark reuses Python workers across tasks.
_consumers: dict[str, KafkaConsumer] = {}
_producers: dict[str, KafkaProducer | RdProducer] = {}

# One range consumer per (client, bootstrap, process, owner): librdkafka's threads do not survive
# a fork (Spark forks its Python workers from a daemon), a range is read by one generator at a time,
# and the driver reads small batches on several threads at once (dsp.shared) while other threads of
# its process use the shared consumer. The owner is the reading thread, or one who never reads on
# two threads at once (a node's lane: dsp.process_stream runs it one batch at a time), named by a
# string and closed by `release` (its lane is gone): an owner's consumer keeps every partition it
# read assigned (wire.kafka.consumers.fetch_only), a thread's does not.
_owned: dict[tuple[str, str, int, int | str], Any] = {}
_clients_lock = threading.Lock()


def _closed(client: Any) -> bool:
    """Closed by its user (a producer that lost messages: wire.kafka.producers.deliver)."""
    return bool(getattr(client, "closed", False) or getattr(client, "_closed", False))


def _shared(clients: dict, bootstrap: str, make: Callable[[str], Any]) -> Any:
    with _clients_lock:
        client = clients.get(bootstrap)
        if client is None or _closed(client):
            client = clients[bootstrap] = make(bootstrap)
        return client


def shared_consumer(bootstrap: str) -> KafkaConsumer:
    return _shared(_consumers, bootstrap, make_consumer)


def shared_producer(bootstrap: str) -> RdProducer:
    """The process's producer of `bootstrap` for its nodes' batches (librdkafka)."""
    return _shared(_producers, bootstrap, RdProducer)


def owned_consumer(client: str, bootstrap: str, make: Callable[[str], Any], owner: str = "") -> Any:
    """`owner`'s consumer of `client`'s kind ("kafka-python", "librdkafka"), or the calling thread's."""
    key = (client, bootstrap, os.getpid(), owner or threading.get_ident())
    with _clients_lock:
        consumer = _owned.get(key)
        if consumer is None:
            _close_orphans()
            consumer = _owned[key] = make(bootstrap)
        return consumer


def release(owner: str) -> None:
    """Close the consumers `owner` read with (a lane no longer read)."""
    with _clients_lock:
        for key in [k for k in _owned if k[3] == owner and k[2] == os.getpid()]:
            _owned.pop(key).close()


def _close_orphans() -> None:
    """Close the consumers of this process's threads that ended."""
    alive = {thread.ident for thread in threading.enumerate()}
    for key in [k for k in _owned if k[2] == os.getpid() and isinstance(k[3], int) and k[3] not in alive]:
        _owned.pop(key).close()


def drop_clients(bootstrap: str) -> None:
    """Close and forget this process's clients of `bootstrap` and what they learned (its broker is
    gone: an embedded one stopped). A benchmark runs hierarchy after hierarchy in one process, each
    on a broker of its own; the clients of the ones before kept retrying theirs."""
    with _clients_lock:
        clients = [cache.pop(bootstrap) for cache in (_producers, _consumers) if bootstrap in cache]
        clients += [_owned.pop(k) for k in [k for k in _owned if k[1] == bootstrap and k[2] == os.getpid()]]
    for client in clients:
        with contextlib.suppress(Exception):   # a client of a dead broker: nothing to flush
            client.close(timeout=0) if isinstance(client, KafkaProducer | RdProducer) else client.close()


def delete_topics(bootstrap: str, topics: Sequence[str]) -> list[str]:
    """Delete those of `topics` that exist, after this process's producers forget them (other
    processes' nodes did at the cancel); those of `topics` gone now (deleted, or there was none).
    Raises KafkaError when the broker refuses or cannot be reached."""
    with _clients_lock:
        local = [p for address, p in _producers.items() if address == bootstrap]
    for producer in local:
        forget_topics(producer, topics)
    return admin.delete_topics(bootstrap, topics)
