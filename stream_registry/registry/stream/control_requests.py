"""What other threads hand a stream's poll thread through its control queue (worker.py drains it between batches,
and before an assignment is served): an offset call's offsets, a change the host could not record, a cancel."""
from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from ...model import GateEvent


@dataclass(frozen=True)
class OffsetRequest:
    """One call's offsets, for the poll thread's gate."""
    change_id: int
    offsets: Mapping
    onward: frozenset = frozenset()
    supersedes: int | None = None


@dataclass(frozen=True)
class AbandonRequest:
    """The host could not record this change: the gate drops it, never applied."""
    change_id: int


class CancelRequest:
    """Cancel every change not persisted yet (poll thread); `cancelled` holds them once `done` is set."""

    def __init__(self, up_to: int | None):
        self.up_to = up_to
        self.cancelled: list[GateEvent] = []
        self.done = threading.Event()
