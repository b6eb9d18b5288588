"""A batch's round trip to the sink while the poll thread reads and prepares the next one.

A stream writing to a graph server spends most of its time waiting for the server's reply (bench/
ingest_throughput.py --sink bolt --profile: the sink is about 90% of the poll thread's wall time). When the sink
can split a write into the client's share and its round trip (`prepare` / `write_prepared`: the Bolt sink), an
at-least-once stream (errors.tolerance 'none') hands batch N's round trip to a thread of its own and consumes,
transforms and prepares batch N+1 meanwhile (BatchWriter). What stays as it was:

- order: one write in flight at most; N+1 is sent only once N's write returned, so the graph gets the batches in
  the order they were read;
- the group's offsets: N is committed (and the offset gate told the stream stands after it) only once its write
  returned, never while it is in flight;
- a failed write: N is written again on the poll thread with the stream's retries (its messages are still in
  memory), before N+1 is sent; where no retry can be made (a rebalance callback, the close) its partitions are
  sought back to N's first offsets and read again, and the messages after N collected meanwhile are dropped;
- offset changes and the rest of the work between batches: the worker lets a write stay in flight only while
  nothing would act (no control request, no change under way, nothing held or to reset, no call coming); else
  the write is done first, so an offset change never reports `applied` with a write from the old position in
  flight, and the positions the gate reads are those of written batches;
- a revoke (inside the rebalance callback) and the close wait for the write first: its offsets are committed
  while this member still owns the partitions.

Exactly-once streams (each batch's offsets compared-and-set with it), streams that set messages aside, and every
other sink write as before, on the poll thread. tests/unit/test_write_behind.py holds the model.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Message as KafkaMessage


class Flight:
    """One batch's write on its thread: the batch, when its delivery started, and how the write ended."""

    __slots__ = ("batch", "started", "error", "_thread")

    def __init__(self, batch: Sequence[KafkaMessage], started: float, write: Callable[[], Any], name: str):
        self.batch, self.started = batch, started
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(write,), name=name, daemon=True)
        self._thread.start()

    def _run(self, write: Callable[[], Any]) -> None:
        try:
            write()
        except BaseException as exc:  # handed to the poll thread, which decides (BatchWriter.finish)
            self.error = exc

    def join(self) -> None:
        self._thread.join()


class WriteBehind:
    """At most one write in flight (poll thread): `start` hands one over, `take` waits for it and returns it."""

    def __init__(self, name: str):
        self._name = f"mgstreams-{name}-write"
        self._flight: Flight | None = None

    @property
    def busy(self) -> bool:
        return self._flight is not None

    def start(self, batch: Sequence[KafkaMessage], started: float, write: Callable[[], Any]) -> None:
        if self._flight is not None:
            raise RuntimeError("a write is in flight already: take it first")
        self._flight = Flight(batch, started, write, self._name)

    def take(self) -> Flight | None:
        """The write in flight, once it returned (None when there is none)."""
        flight, self._flight = self._flight, None
        if flight is not None:
            flight.join()
        return flight
