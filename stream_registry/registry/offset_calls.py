"""One set_offset (or revert) call after its hand-off: what its caller waits for, and how its answer is read.

The registry plans a call, records it as a pending change and hands it to the
stream's gate under the stream's lock; the wait for its outcome is the caller's.
An in-process caller waits on a condition (ChangeSets.wait); the host awaits it
on its event loop (mgstreams.host.waits), holding no thread. Either way the wait
ends at `deadline` (counted from the call's arrival), when no row of the change
is pending any more, or when its stream no longer runs (`live`), and `answer()`
then reads what became of each partition from the state store.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..model import OffsetChange


@dataclass(frozen=True, eq=False)
class OffsetCall:
    name: str                                   # the stream
    change_id: int | None                       # None: nothing to wait for (a dry run, nothing to move, not running)
    deadline: float                             # time.monotonic() when its caller stops waiting
    live: Callable[[], bool]                    # whether the stream still runs (or restarts) to apply the change
    answer: Callable[[], list[OffsetChange]]    # what became of each partition, read when the wait ends

    @property
    def waits(self) -> bool:
        return self.change_id is not None
