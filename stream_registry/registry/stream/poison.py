"""Poison messages: deliver a batch around the messages it fails on.

With errors.tolerance 'all' (Kafka Connect's name), a batch whose transformation
fails, or whose sink rejects it for a reason that retrying cannot fix, is split
in halves, and each half written on its own, down to the single messages that
fail: one poison message in n costs about 2·log2(n) re-runs. Those are set
aside (dead-lettered or skipped); every other message is written, in order.

Only an error the messages may have caused starts a bisection: a failing
transformation (a decode or deserialization error included), or a sink that
refused the statements themselves. Transient errors (a lost connection, a
timeout, a full disk, a conflicting transaction) and a sink that cannot write
at all (an untrusted certificate) or must be realigned are never a message's
fault: they leave the delivery where it is, for the batch's retry to continue
from, so messages already written are not written again. The decision is by
the error's type (graph.sink_faults), never by words in its text: topic names
and payloads are in it.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from ...graph.sink_faults import Fault, classify

Item = TypeVar("Item")


class BatchDelivery(Generic[Item]):
    """Writes `items` with `write(chunk)`; `set_aside(item, error)` takes each one that fails alone.

    `run()` may be called again after it raised (a transient error, or a
    set-aside that failed): it continues with the first item not yet handled.
    """

    def __init__(self, items: Sequence[Item], write: Callable[[Sequence[Item]], None],
                 set_aside: Callable[[Item, BaseException], None], tolerate: bool):
        self._items = list(items)
        self._write, self._set_aside, self._tolerate = write, set_aside, tolerate
        self.done = 0          # items handled, a prefix of `items`
        self.set_aside = 0     # of which set aside
        self.writes = 0        # write calls, the first included

    def run(self) -> None:
        while self.done < len(self._items):
            self._deliver(self._items[self.done:])

    def _deliver(self, chunk: list[Item]) -> None:
        try:
            self.writes += 1
            self._write(chunk)
        except Exception as exc:
            if not self._tolerate or not may_be_poison(exc):
                raise
            if len(chunk) == 1:
                self._set_aside(chunk[0], exc)
                self.set_aside += 1
                self.done += 1
                return
            middle = len(chunk) // 2
            self._deliver(chunk[:middle])
            self._deliver(chunk[middle:])
            return
        self.done += len(chunk)


def may_be_poison(error: BaseException) -> bool:
    """Whether the messages written may be at fault (graph.sink_faults.classify): what the transformation
    raised, or the database refusing the statements; never a transient or a sink-wide error."""
    return classify(error) is Fault.MESSAGE
