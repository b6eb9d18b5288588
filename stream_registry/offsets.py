"""Offset values reported to users: changes, per-partition positions and the audit trail."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping

from .offset_spec import ChangeStatus


@dataclass(frozen=True)
class OffsetChange:
    """One partition's outcome of set_offset (Memgraph dialect offsets are never stored here:
    `offset` is the concrete offset, None when the partition could not be changed)."""
    topic: str
    partition: int
    previous_offset: int | None
    offset: int | None
    status: ChangeStatus
    message: str = ""
    change_id: int | None = None   # the call's change (None: a dry run, or nothing to change)


@dataclass(frozen=True)
class PartitionOffsets:
    """One row of describe(), like `kafka-consumer-groups --describe`."""
    topic: str
    partition: int
    committed_offset: int | None
    position: int | None
    log_start_offset: int
    log_end_offset: int
    lag: int | None
    assigned: bool
    stored_offset: int | None = None   # exactly-once: the next offset the sink holds with the data
    resume_offset: int | None = None   # where the stream resumes if started now: pending, else stored
                                       # (exactly-once), else committed, else auto.offset.reset


@dataclass(frozen=True)
class HistoryEntry:
    """A row of the registry's audit history: an applied offset change, or a poison message set aside
    (status skipped or dead_lettered: `offset` is that message's, `message` the error it raised)."""
    changed_at: datetime
    topic: str
    partition: int
    previous_offset: int | None
    offset: int
    status: ChangeStatus
    message: str | None = None
    change_id: int | None = None    # the call's: every partition one call changed shares it (revert takes it)


@dataclass(frozen=True)
class PendingOffset:
    """An offset change waiting for its partition to be assigned (a stopped stream, or a partition another
    member of the group holds); `previous_offset` is where the partition stood when it was requested."""
    topic: str
    partition: int
    offset: int
    requested_at: datetime
    previous_offset: int | None = None
    message: str | None = None     # e.g. "revert of change 12", recorded in the history once applied
    change_id: int | None = None   # the call it belongs to (every partition of one call shares it)
    reason: str | None = None      # why it waits beyond an assignment (its commit failed, retried)


@dataclass(frozen=True)
class PreviewStatement:
    """One statement the stream's transformation makes of the record at topic/partition/offset (a preview:
    nothing was written); `parameters` are plain JSON values (bytes as text, times as ISO-8601)."""
    topic: str
    partition: int
    offset: int
    query: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
