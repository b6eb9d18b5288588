"""Offset calls the host announced and is still resolving: while one is, newly assigned partitions wait.

A set_offset (or revert) call is accepted by the host before it knows its offsets: resolving them asks the
cluster (metadata, watermarks, time lookups), which takes a while. Under KIP-848 a starting stream's first
assignment can arrive meanwhile, and a partition started then would deliver from the group's offset before
the call's request reached the stream: records from the old position after a call was accepted (order C of
the first-assignment race; the docs promise that a call made while the rebalance is pending is where each
partition starts). So the host says "a call is coming" before it resolves, and "it ended" once it handed the
request over (or failed), both from its own thread, at once. Partitions assigned while a call is coming are
held, never delivered from (assignment.py), and start where the gate says (the call's target, if it named
them) once no call is coming.

The order that makes this safe: the request is queued before its call ends, and whoever releases the hold
first sees no call coming, then drains the queue (so the request is in the gate before a partition starts).

A call that fails, is cancelled or times out in the host ends too (the host's `finally`). An announcement whose
end never comes (a host killed mid-call: its stream processes exit with it, but a lost message must not hold
partitions for ever) lapses `within` seconds after it was made plus LAPSE_SLACK_S: `within` is what the call's
caller waits at most.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

LAPSE_SLACK_S = 2.0   # an announcement lapses this long after its call's deadline, if its end never came


class CallsComing:
    """The announced calls, each with when it lapses (thread-safe); `wake` wakes the poll thread at an end,
    `on_coming` is told of each announcement (from the announcing thread, at once: e.g. to get the consumer ready
    for the move the call will make)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, wake: Callable[[], None] = lambda: None,
                 on_coming: Callable[[], None] = lambda: None):
        self._clock, self._wake, self._on_coming = clock, wake, on_coming
        self._lock = threading.Lock()
        self._calls: dict[object, float] = {}

    def coming(self, token: object, within: float) -> None:
        """A call is being resolved; it ends (ended) or lapses `within` (+ LAPSE_SLACK_S) seconds from now."""
        with self._lock:
            self._calls[token] = self._clock() + max(within, 0.0) + LAPSE_SLACK_S
        self._on_coming()

    def ended(self, token: object) -> None:
        """The call ended: its request, if it made one, was queued before."""
        with self._lock:
            self._calls.pop(token, None)
        self._wake()

    def any(self) -> bool:
        """Whether a call is still coming (lapsed ones are dropped)."""
        now = self._clock()
        with self._lock:
            for token in [t for t, until in self._calls.items() if until <= now]:
                del self._calls[token]
            return bool(self._calls)
