"""A synchronous offset commit that never holds the poll thread past a deadline.

librdkafka's synchronous commit waits for the group coordinator with no bound of
its own: with every broker down, `Consumer.commit(asynchronous=False)` returned
only after about 45 s (its request timed out in the coordinator's wait queue),
and meanwhile the poll thread noticed nothing, not even the outage. So the commit
runs on a helper thread and the poll thread waits for its answer in short
slices (one helper thread per consumer, kept while commits keep coming: a thread
started per batch cost a tenth of a millisecond each, bench/stream_profile.py), asking `give_up()` between them (the worker probes the cluster there and
gives up once an outage is confirmed) until the deadline. A commit given up on
goes on in its thread; the next one fails at once while it does (two commits of
one consumer never race each other), and closing the consumer waits for it, as
librdkafka's close waits for every outstanding commit.

confluent-kafka (2.16) makes every call on a consumer wait while another thread's
call on it runs (a busy wait, its per-consumer gate): while a commit runs here,
a consume(), seek() or close() of the poll thread would wait for it, and a commit
made while the cluster is down waits until the cluster comes back. So the poll
thread makes no call on the consumer while `busy` (the worker waits for the answer
in slices, probing the cluster through a client of its own, and sees a stop), and
a close while a commit still hangs is left to this thread, after it (`close_after`).

Inside a rebalance callback (an offset change applied at assignment) a commit
made from another thread is not answered until the callback returns (seen: it
waited out its deadline), so there it is made directly, on the poll thread, as
before; the group has just answered then.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Consumer, TopicPartition

log = logging.getLogger("mgstreams.worker")

WAIT_SLICE_S = 0.1
HELPER_IDLE_S = 1.0   # a helper thread with no commit to make this long ends (the next commit starts another)


class CommitUnanswered(Exception):
    """No answer to a commit within its deadline (or the worker gave up waiting): its outcome is unknown."""


class PendingCommit:
    """A commit handed to the helper thread: `done` once answered, the answer ("result" or "error") in `answer`."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.answer: dict[str, Any] = {}


class BoundedCommitter:
    """One consumer's synchronous commits, each waited for at most until its deadline."""

    def __init__(self, name: str, clock: Callable[[], float] = time.monotonic):
        self._name, self._clock = name, clock
        self._running: threading.Event | None = None   # the last commit started (done once answered)
        self.started_at = 0.0   # when it started
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._helper: threading.Thread | None = None
        self._helper_lock = threading.Lock()

    @property
    def busy(self) -> bool:
        return self._running is not None and not self._running.is_set()

    def wait_running(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the commit started last to be answered; True once none runs."""
        running = self._running
        return running is None or running.wait(timeout_s)

    def close_after(self, consumer: Consumer) -> None:
        """Close `consumer` on this thread, once the commit it runs now returns (the poll thread does not wait for
        it: a commit made while the cluster is down returns when the cluster is back; a process that ends first
        leaves the group by its session timeout)."""
        def close() -> None:
            try:
                consumer.close()
            except Exception as exc:   # nothing waits for it any more: said, not raised
                log.warning("commit thread %s: closing the consumer failed: %s", self._name, exc)
        self._hand_over(close)

    def commit(self, consumer: Consumer, offsets: Sequence[TopicPartition], wait_s: float,
               give_up: Callable[[], bool] = lambda: False, direct: bool = False) -> Any:
        """`consumer.commit(offsets=..., asynchronous=False)`'s result, or its KafkaException raised here;
        CommitUnanswered when no answer came within `wait_s` or `give_up()` said so. `direct`: in this thread
        (inside a rebalance callback)."""
        if direct and not self.busy:
            return consumer.commit(offsets=list(offsets), asynchronous=False)
        return self.wait(self.start(consumer, offsets, give_up), wait_s, give_up)

    def start(self, consumer: Consumer, offsets: Sequence[TopicPartition],
              give_up: Callable[[], bool] = lambda: False) -> PendingCommit:
        """Hand the commit to the helper thread and return at once; its answer through `wait`. The committer is
        busy until it is answered (CommitUnanswered for another commit meanwhile: one at a time, in order)."""
        if self.busy:
            give_up()   # nothing waits here, but the caller probes the cluster as it would while waiting: an outage
            # that began while an earlier commit hung is seen from this state too (the owed commit's retries)
            raise CommitUnanswered("an earlier commit still waits for the group coordinator")
        pending = PendingCommit()

        def run() -> None:
            try:
                pending.answer["result"] = consumer.commit(offsets=list(offsets), asynchronous=False)
            except BaseException as exc:  # handed to the waiting poll thread
                pending.answer["error"] = exc
            finally:
                pending.done.set()
        self._running, self.started_at = pending.done, self._clock()
        self._hand_over(run)
        return pending

    def wait(self, pending: PendingCommit, wait_s: float, give_up: Callable[[], bool] = lambda: False) -> Any:
        """A started commit's result (its KafkaException raised here); CommitUnanswered when no answer came within
        `wait_s` or `give_up()` said so (it goes on in its thread, the committer busy until it ends)."""
        waited = 0.0
        while not pending.done.wait(WAIT_SLICE_S):
            waited += WAIT_SLICE_S
            if waited >= wait_s or give_up():
                raise CommitUnanswered(f"no answer from the group coordinator within {waited:.1f} s")
        if "error" in pending.answer:
            raise pending.answer["error"]
        return pending.answer.get("result")

    def _hand_over(self, job: Callable[[], None]) -> None:
        """Give `job` to the helper thread, starting one when none runs (one that found no job for HELPER_IDLE_S
        ended, under the same lock: a job is never left behind)."""
        with self._helper_lock:
            self._jobs.put(job)
            if self._helper is None:
                self._helper = threading.Thread(target=self._serve, name=f"mgstreams-commit-{self._name}",
                                                daemon=True)
                self._helper.start()

    def _serve(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=HELPER_IDLE_S)
            except queue.Empty:
                with self._helper_lock:
                    if self._jobs.empty():
                        self._helper = None
                        return
                continue
            job()
