"""Which offset changes a stream process was handed before the host's record of them was durable.

The host hands a change to the stream inside the transaction that records it, before its commit's fsync
(engine.RecordsMeanwhile), then says whether the record was written. The stream may seek meanwhile; it persists
nothing of the change (commit, delivery from its targets) until the record is durable, and drops the change when
the record was not written. Any thread says what the host said; the poll thread waits for it in persist.
"""
from __future__ import annotations

import threading
from collections.abc import Iterable

RECORD_WAIT_S = 2.0         # how long a persist waits for the host to say a change's record is durable
NOT_RECORDED = "the host has not recorded the change durably yet"
NOT_WRITTEN = "the host could not record the change; it is dropped, not applied"


class ChangeRecords:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._unrecorded: set[int] = set()   # handed before their record was durable
        self._abandoned: set[int] = set()    # ... whose record was not written

    def handed(self, change_id: int) -> None:
        """The change arrives before its record is durable (recorded() follows)."""
        with self._cond:
            self._unrecorded.add(change_id)

    def recorded(self, change_id: int, ok: bool) -> None:
        with self._cond:
            self._unrecorded.discard(change_id)
            if not ok:
                self._abandoned.add(change_id)
            self._cond.notify_all()

    def why_not(self, change_ids: Iterable[int], timeout: float = RECORD_WAIT_S) -> str | None:
        """None once every change's record is durable (waiting up to `timeout`); else why it cannot be persisted."""
        changes = set(change_ids)
        with self._cond:
            if not self._cond.wait_for(lambda: not changes & self._unrecorded, timeout):
                return NOT_RECORDED
            return NOT_WRITTEN if changes & self._abandoned else None
