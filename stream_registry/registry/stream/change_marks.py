"""What a persisted offset says about the change it came from.

A stream persists an offset change (the Kafka commit; exactly-once: the sink's store, then the commit) before
the host records it in its history. If the host dies in between, the pending row outlives the change, and a
new stream process handed that row would apply it a second time. So every commit of a partition carries, in
Kafka's per-partition metadata string (OffsetCommit's `committed_metadata`, which brokers cap at
`offset.metadata.max.bytes`, 4096 by default), the last change this stream process persisted on it: a
ChangeMark. A stream taking the partition over reads it with the committed offset (one batched `committed()`
call) and the offset gate reconciles its waiting change with it: a change already persisted is reported as
applied, never applied again; one an even later change followed is superseded.

A commit by another member of the group (or another application) carries its own metadata, or none: then the
mark is gone, and the group's committed offset is all that is known (an onward move is judged against it).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

PREFIX = "mgstreams:"
MAX_METADATA = 4096   # offset.metadata.max.bytes' default: a longer string fails the whole commit


@dataclass(frozen=True)
class ChangeMark:
    """The change a committed offset came from: its id, where it moved the partition, from where, and when it was
    persisted (epoch seconds). A mark older than a change's request is not about that change: change ids start
    over in a new state directory, or for a stream dropped and created again with the same consumer group."""
    change_id: int
    offset: int
    previous: int | None = None
    at: float = 0.0

    def about(self, change_id: int, requested_at: float) -> bool:
        """Does this mark say what became of change `change_id` (requested at `requested_at`): persisted (the
        same id) or followed by a later change (a greater one)?"""
        return self.change_id >= change_id and self.at >= requested_at

    def encode(self) -> str:
        text = PREFIX + json.dumps({"change": self.change_id, "offset": self.offset, "previous": self.previous,
                                    "at": round(self.at, 3)}, separators=(",", ":"))
        return text if len(text.encode()) <= MAX_METADATA else ""

    @staticmethod
    def decode(metadata: str | None) -> ChangeMark | None:
        """The mark in a committed offset's metadata; None for anyone else's metadata (or none, or garbage)."""
        if not metadata or not metadata.startswith(PREFIX):
            return None
        try:
            data = json.loads(metadata[len(PREFIX):])
            change, offset, previous, at = data["change"], data["offset"], data.get("previous"), data.get("at", 0)
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        if isinstance(at, bool) or not isinstance(at, (int, float)):
            return None
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (change, offset)) or \
                not (previous is None or (isinstance(previous, int) and not isinstance(previous, bool)
                                          and previous >= 0)):
            return None
        return ChangeMark(change, offset, previous, float(at))


@dataclass(frozen=True)
class Committed:
    """A partition's committed offset as a stream taking it over reads it (None: none, or not read), and the
    change mark it carries."""
    offset: int | None = None
    mark: ChangeMark | None = None
