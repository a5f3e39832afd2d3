"""The Kafka client helpers against a real broker of their own (it is stopped mid-test)."""

import pytest

from services.embedded import _stop, start_broker
from wire import bus


def test_deliver_raises_for_messages_the_broker_never_took(tmp_path):
    bootstrap, proc = start_broker(str(tmp_path))
    try:
        bus.ensure_topics(bootstrap, ["t"])
        producer = bus.make_producer(bootstrap, request_timeout_ms=1000, delivery_timeout_ms=2000, retries=1)
        bus.deliver(producer, [producer.send("t", b"taken")])       # a live broker takes it: no error
    finally:
        _stop(proc)
    futures = [producer.send("t", b"lost 1"), producer.send("t", b"lost 2")]
    with pytest.raises(bus.DeliveryError, match="2 of 2 messages not delivered"):
        bus.deliver(producer, futures)
    producer.close(timeout=1)
