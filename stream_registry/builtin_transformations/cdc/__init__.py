"""Debezium change events as graph changes: the `debezium` built-in transformation's logic.

A Debezium connector writes one event per row change: the key holds the row's primary key columns, the value an
envelope `{before, after, source, op, ts_ms, ...}` (or the unwrap SMT's flat row). The Neo4j connector's "schema"
strategy is the model: a node per row, labelled by its table, keyed by its primary key.

- the stream names the tables it mirrors (`tables`); records of other tables, heartbeats, schema changes,
  transaction metadata, logical decoding messages and tombstones are skipped and counted (events.py);
- `r`/`c`/`u`: the row's node gets the row's columns (TOASTed columns keep the stored value); `d`: the node goes
  and a marker keeps the delete's position; `t`: the table's nodes go (`truncate: ignore` keeps them);
- a complete snapshot (its `last` read) removes the table's nodes it did not read;
- foreign keys named in `relationships` become relationships to the referenced row's node;
- every write is guarded by the source position (positions.py): an event older than what the graph holds
  changes nothing, so replays, redeliveries and out-of-order partitions leave the graph as the table is;
- only nodes carrying the stream's mark (`mark`) are matched, updated or deleted (cypher.py).

Within a batch, the events of one row fold into the newest (fold.py): the statements name each node once, so the
result does not depend on how an engine plans an UNWIND over rows of one node.
"""
from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from .cypher import POSITION
from .events import SNAPSHOT_ENDS, Change, read_change
from .fold import Segment
from .options import CdcOptions, RelationshipSpec
from .positions import Position, source_position

__all__ = ["POSITION_PROPERTY", "CdcOptions", "Change", "Position", "RelationshipSpec", "SKIPPED", "read_change",
           "source_position", "statements"]

POSITION_PROPERTY = POSITION
SKIPPED: Counter[str] = Counter()   # records skipped by this process, by kind (heartbeat, not_mirrored, ...)
log = logging.getLogger("mgstreams.debezium")
_LAST: list[Any] = [None, None]   # the options last parsed and what they parsed to (a stream's are bound once)


def _parsed(options: Mapping[str, Any] | None) -> CdcOptions:
    if options is None or options is not _LAST[0]:
        parsed = CdcOptions.parse(options)
        _LAST[:] = [options, parsed]
        return parsed
    return _LAST[1]


def statements(messages: Iterable[Any], options: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The batch's records as Cypher records (see the module docstring)."""
    parsed = _parsed(options)
    out: list[dict[str, Any]] = []
    segment = Segment(parsed)
    skipped: Counter[str] = Counter()
    for message in messages:
        change = read_change(message, parsed)
        if change.kind == "skip":
            skipped[change.reason] += 1
        elif change.kind == "truncate":
            if parsed.truncate == "delete":
                out.extend(segment.flush())
                out.extend(segment.truncate(change))
        else:
            segment.add(change)
            if change.snapshot in SNAPSHOT_ENDS:
                out.extend(segment.flush())
                out.extend(segment.sweep(change))
    out.extend(segment.flush())
    out.extend(segment.age_markers())
    if skipped:
        SKIPPED.update(skipped)
        log.info("debezium: skipped %s (this process: %s)", dict(skipped), dict(SKIPPED))
    return out
