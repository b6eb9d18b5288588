"""A synchronous offset commit that never holds the poll thread past a deadline.

librdkafka's synchronous commit waits for the group coordinator with no bound of
its own: with every broker down, `Consumer.commit(asynchronous=False)` returned
only after about 45 s (its request timed out in the coordinator's wait queue),
and meanwhile the poll thread noticed nothing, not even the outage. So the commit
runs on a helper thread and the poll thread waits for its answer in short
slices, asking `give_up()` between them (the worker probes the cluster there and
gives up once an outage is confirmed) until the deadline. A commit given up on
goes on in its thread; the next one fails at once while it does (two commits of
one consumer never race each other), and closing the consumer waits for it, as
librdkafka's close waits for every outstanding commit.

Inside a rebalance callback (an offset change applied at assignment) a commit
made from another thread is not answered until the callback returns (seen: it
waited out its deadline), so there it is made directly, on the poll thread, as
before; the group has just answered then.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Consumer, TopicPartition

WAIT_SLICE_S = 0.1


class CommitUnanswered(Exception):
    """No answer to a commit within its deadline (or the worker gave up waiting): its outcome is unknown."""


class BoundedCommitter:
    """One consumer's synchronous commits, each waited for at most until its deadline."""

    def __init__(self, name: str):
        self._name = name
        self._running: threading.Thread | None = None   # a commit given up on, still waiting in librdkafka

    @property
    def busy(self) -> bool:
        return self._running is not None and self._running.is_alive()

    def commit(self, consumer: Consumer, offsets: Sequence[TopicPartition], wait_s: float,
               give_up: Callable[[], bool] = lambda: False, direct: bool = False) -> Any:
        """`consumer.commit(offsets=..., asynchronous=False)`'s result, or its KafkaException raised here;
        CommitUnanswered when no answer came within `wait_s` or `give_up()` said so. `direct`: in this thread
        (inside a rebalance callback)."""
        if direct and not self.busy:
            return consumer.commit(offsets=list(offsets), asynchronous=False)
        if self.busy:
            give_up()   # nothing waits here, but the caller probes the cluster as it would while waiting: an outage
            # that began while an earlier commit hung is seen from this state too (the owed commit's retries)
            raise CommitUnanswered("an earlier commit still waits for the group coordinator")
        answer: dict[str, Any] = {}
        done = threading.Event()

        def run() -> None:
            try:
                answer["result"] = consumer.commit(offsets=list(offsets), asynchronous=False)
            except BaseException as exc:  # handed to the waiting poll thread
                answer["error"] = exc
            finally:
                done.set()
        thread = threading.Thread(target=run, name=f"mgstreams-commit-{self._name}", daemon=True)
        thread.start()
        waited = 0.0
        while not done.wait(WAIT_SLICE_S):
            waited += WAIT_SLICE_S
            if waited >= wait_s or give_up():
                self._running = thread
                raise CommitUnanswered(f"no answer from the group coordinator within {waited:.1f} s")
        if "error" in answer:
            raise answer["error"]
        return answer.get("result")
