"""What a running stream tells whoever runs it: the registry, a stream process's pipe, a task runner.

Every engine (engines.py) reports through these callbacks, from whatever thread it
runs on; the registry turns them into its state store's rows and a stream's status.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from ...model import GateEvent, Realignment, RecordsLost, SetAside, StreamStatus
from .batch_stats import BatchStats


@dataclass(frozen=True)
class StreamEvents:
    """What a running stream tells whoever runs it (the registry, or a stream process's pipe)."""
    on_status: Callable[[StreamStatus, str | None], None] = lambda status, error: None
    on_change: Callable[[GateEvent], None] = lambda event: None   # an offset change persisted, or held back
    on_set_aside: Callable[[list[SetAside]], None] = lambda records: None     # poison messages
    on_stats: Callable[[BatchStats], None] = lambda stats: None               # since this worker started
    on_realign: Callable[[list[Realignment]], None] = lambda moves: None     # exactly-once: the sink decided
    on_lost: Callable[[RecordsLost], None] = lambda lost: None                # records that left the log unread
    on_outage: Callable[[datetime | None], None] = lambda since: None         # no broker answers, since (None: over)
