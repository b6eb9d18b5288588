"""Issue 42, reproduction 5, at the poll loop over a consumer stand-in that behaves as confluent-kafka 2.16 does:
while a commit runs on the commit thread, every other call on that consumer waits for it (the client's
per-consumer gate), and a commit the cluster's going away caught waits until the cluster is back. The poll loop
makes no call on the consumer meanwhile: the outage reaches the stream's error (the probe is a client of its own,
here one whose cluster does not exist), and a stop ends at once, the consumer closed once the commit returns.
Before the fix the loop's next consume() (and its probe through the consumer) waited behind the commit: no error,
and the stop did not end."""
from __future__ import annotations

import threading

from confluent_kafka import TopicPartition
from consumer_standin import ConsumerStandIn, RecordStandIn, worker_on
from stream_helpers import wait_until

from stream_registry.model import StreamStatus


class _GatedConsumer(ConsumerStandIn):
    """Every call waits while a commit runs (confluent-kafka's gate); commits wait for `back` (the cluster)."""

    def __init__(self):
        super().__init__()
        self.gate = threading.Lock()
        self.back = threading.Event()
        self.committing = threading.Event()
        self.closed = threading.Event()
        self._callbacks: dict = {}
        self._served = 0

    def subscribe(self, topics, **callbacks):
        self._callbacks = callbacks

    def commit(self, offsets, asynchronous=True):
        with self.gate:
            self.committing.set()
            self.back.wait(60)
            return super().commit(offsets, asynchronous)

    def consume(self, num_messages=1, timeout=-1):
        with self.gate:
            self._served += 1
            if self._served == 1:
                self._callbacks["on_assign"](self, [TopicPartition("t", 0)])
                return []
            if self._served == 2:
                return [RecordStandIn(0), RecordStandIn(1)]
            self.back.wait(min(timeout, 0.01))
            return []

    def list_topics(self, timeout=None):
        with self.gate:
            return super().list_topics(timeout)

    def close(self):
        with self.gate:
            super().close()
            self.closed.set()


def test_a_commit_waiting_for_a_cluster_gone_holds_no_call_of_the_poll_loop():
    consumer = _GatedConsumer()
    consumer.reachable = False
    worker, _ = worker_on(consumer, batch_interval_ms=20)
    worker._open_consumer = lambda: consumer
    consumer.subscribe(["t"], **worker.assignment.callbacks())
    worker.start()
    try:
        assert consumer.committing.wait(30), "the batch's commit made"
        wait_until(lambda: worker.error, 30, what="the outage in the stream's error",
                   describe=lambda: (worker.status, worker.error))
        assert worker.error.startswith("all brokers down since") and worker.status == StreamStatus.RUNNING
        worker.stop(timeout=5.0)   # raises StreamError when the poll thread did not end
        assert not worker.alive and not consumer.closed.is_set(), "stopped at once; not closed behind the commit"
    finally:
        consumer.back.set()
    assert consumer.closed.wait(30), "closed on the commit thread once the commit returned"
