"""What the soak saw the host answer, turned into the oracle's input and checked against the host's history.

Each set_offset call is kept as a `Call` (what it asked, the sink file's size
before and after, the per-partition answer). The host's offset history, read at
the end, is the other witness: `changes_for` builds the changes the oracle
weighs for a partition, `contradictions` and `invalid_offsets` are findings of
their own.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from datetime import datetime

from .oracle import Change, Rec
from .plan import StreamPlan


@dataclass
class Call:
    """One set_offset call through the host API."""
    stream: str
    spec: object
    started: float
    size_before: int
    returned: float | None = None
    size_after: int | None = None
    rows: list | None = None          # OffsetChange rows; None when refused or unknown
    error: str | None = None
    unknown: bool = False             # no answer: it may or may not have acted


def contradictions(calls: list[Call], history: dict[str, list], cancelled: list[tuple] = ()) -> list[str]:
    """What a set_offset or revert call was told that the host's history contradicts: a partition reported
    applied (or clamped) whose change has no such history row, or one with another offset, previous offset,
    status or message; one reported superseded or cancelled that the history shows applied; a pending row a
    cancel said it cancelled (`cancelled`: stream, change id, topic, partition) that the history shows applied."""
    out = []
    for stream, change_id, topic, partition in cancelled:
        for h in history.get(stream, []):
            if (h.change_id, h.topic, h.partition) == (change_id, topic, partition) and \
                    h.status.value in ("applied", "clamped"):
                out.append(f"{stream} {topic}:{partition} change {change_id}: cancel said cancelled, the history "
                           f"shows it {h.status.value} {h.previous_offset}->{h.offset} at {h.changed_at}")
    for call in calls:
        recorded = {(h.change_id, h.topic, h.partition): h for h in history.get(call.stream, [])}
        for row in call.rows or []:
            if row.change_id is None:
                continue
            entry = recorded.get((row.change_id, row.topic, row.partition))
            told = row.status.value
            if told in ("applied", "clamped"):
                seen = None if entry is None else \
                    (entry.offset, entry.previous_offset, entry.status.value, entry.message or "")
                if seen != (row.offset, row.previous_offset, told, row.message):
                    out.append(f"{call.stream} {row.topic}:{row.partition} change {row.change_id}: the call "
                               f"said {told} {row.previous_offset}->{row.offset} {row.message!r}, the history "
                               f"{seen}")
            elif told in ("superseded", "cancelled") and entry is not None:
                out.append(f"{call.stream} {row.topic}:{row.partition} change {row.change_id}: the call said "
                           f"{told}, the history shows it {entry.status.value}")
    return out


def changes_for(calls: list[Call], history: dict[str, list], sightings: dict[tuple, int], plan: StreamPlan,
                partition: int, verdict_notes: list[str], sink_changes: list[float] = (),
                cancelled: list[tuple] = ()) -> list[Change]:
    """The offset changes the oracle weighs for one partition, from the calls' answers and the history's rows.
    `sink_changes`: when the stream's sink was changed (the new sink's start, where the stream stood, is an
    applied row that moves nothing: not a call's). `cancelled`: (stream, change id, topic, partition) a cancel
    said it cancelled: never applied (`contradictions` holds the history to that), so never a continuation's
    start, even where the old continuation passes its offset."""
    tp = (plan.topic, partition)
    asked = []
    for call in calls:
        if call.stream != plan.name or call.rows is None:
            continue
        for row in call.rows:
            if (row.topic, row.partition) == tp and row.offset is not None and \
                    row.status.value in ("applied", "clamped", "pending") and \
                    (plan.name, row.change_id, *tp) not in cancelled:
                asked.append((call, row))
    hi: dict[int, int] = {}
    stood: dict[int, int | None] = {}     # where the stream stood when the change was applied
    went: dict[int, int] = {}             # where the history says it went (an onward move: maybe past the call's)
    for i, (call, row) in enumerate(asked):
        if row.status.value in ("applied", "clamped"):
            hi[i] = call.size_after
            stood[i] = row.previous_offset
    pointer = 0
    for entry in history.get(plan.name, []):
        # a realigned row is the stream resuming where its sink stores (after a kill), not a call: the oracle's
        # continuations already resume there
        if (entry.topic, entry.partition) != tp or entry.status.value not in ("applied", "clamped"):
            continue
        # a sink change's carry-over: where the old sink stood; from where the group had committed, which a kill
        # can leave behind the sink (exactly-once), so only its message says what it is. A row of a call's change
        # (its change id) is that call's, even when it moves nothing (a clamp to where the partition stands)
        own = entry.change_id is not None and any(row.change_id == entry.change_id for _, row in asked)
        carried = entry.previous_offset == entry.offset or "carried over to the new sink" in (entry.message or "")
        if carried and not own and any(entry.changed_at.timestamp() >= t for t in sink_changes):
            continue
        key = (plan.name, entry.changed_at.isoformat(), entry.topic, entry.partition, entry.previous_offset,
               entry.offset)
        seen_at = sightings.get(key)
        # the call's change (by its id), or one asking this offset: an onward move (+N, the end) that found the
        # partition already past its target is applied where the partition got, never back (its history row
        # says so: the offset it went to is that row's)
        match = next((i for i in range(pointer, len(asked)) if own and asked[i][1].change_id == entry.change_id),
                     None) if own else next((i for i in range(pointer, len(asked)) if asked[i][1].offset ==
                                             entry.offset and (seen_at is None or
                                                               seen_at >= asked[i][0].size_before)), None)
        if match is None:
            verdict_notes.append(f"{plan.topic}:{partition}: history shows a change to {entry.offset} at "
                                 f"{entry.changed_at.isoformat()} that no set_offset call asked for")
            continue
        pointer = match + 1
        stood[match] = entry.previous_offset
        went[match] = entry.offset
        if seen_at is not None:
            hi[match] = min(hi.get(match, seen_at), seen_at)
    changes: list[Change] = []
    previous_sure_before: int | None = 0     # the first change resolves against continuation 0
    unknown_before = False
    for i, (call, row) in enumerate(asked):
        claim = row.previous_offset if (previous_sure_before is not None and
                                        previous_sure_before <= call.size_before and
                                        not unknown_before) else None
        changes.append(Change(went.get(i, row.offset), call.size_before, hi.get(i), claim, stood.get(i)))
        previous_sure_before = hi.get(i)
    # Calls whose outcome is unknown make every later claim unsafe for the stream's partitions.
    if any(c.unknown and c.stream == plan.name for c in calls):
        changes = [replace(c, claim=None) for c in changes]
    return changes


def invalid_offsets(calls: list[Call], history: dict[str, list]) -> list[str]:
    """set_offset results and history rows whose offset is not an offset (e.g. librdkafka's -1001)."""
    out = []
    for call in calls:
        for row in call.rows or []:
            if row.offset is not None and row.offset < 0:
                out.append(f"set_offset({call.stream}, {call.spec!r}) at "
                           f"{datetime.fromtimestamp(call.started).strftime('%H:%M:%S.%f')[:-3]} returned "
                           f"{row.topic}:{row.partition} -> {row.offset} ({row.status.value}; previous "
                           f"{row.previous_offset}; {row.message or 'no message'})")
    for name, entries in history.items():
        for e in entries:
            if e.offset < 0:
                out.append(f"history of {name}: {e.topic}:{e.partition} {e.previous_offset} -> {e.offset} "
                           f"{e.status.value} at {e.changed_at.isoformat()}")
    return out


def logical_positions(records: list[Rec], cuts: list[tuple[int, int]]) -> list[Rec]:
    """Records at the positions the soak's monotonic sizes use: a record at byte p of the final file was written
    after the last cut back to at or below p (and before every later one), so it sits at p plus the bytes cut
    up to that cut (`cuts`: (size cut to, bytes removed so far), in order)."""
    if not cuts:
        return records
    out = []
    for r in records:
        shift = 0
        for to, removed in cuts:
            if to <= r.pos:
                shift = removed
        out.append(replace(r, pos=r.pos + shift))
    return out


def with_cuts(changes: list[Change], cut_moves: list, tp: tuple[str, int]) -> list[Change]:
    """The changes plus one per file cut that took this partition's stored offset back: the stream realigns
    there (when is unknown: hi None). Claims are dropped: a cut removes records they vouch for."""
    added = [(m.size, Change(m.moves[tp][1], m.size)) for m in cut_moves if tp in m.moves]
    if not added:
        return changes
    out = [replace(c, claim=None) for c in changes]
    for size, change in added:
        out.insert(bisect.bisect_right([c.lo for c in out], size), change)
    return out


def unexplained_cuts(cut_moves: list, history: dict[str, list]) -> list[str]:
    """File cuts after which the stream resumed somewhere other than Kafka's commit with no `realigned` history
    row saying so: for each partition whose stored offset the cut took back, the first history row after the
    cut must be a realigned one to the offset the file then stored, or a change applied by a call. No row is
    owed where the group's commit, read right after the cut, already was the offset the file then stored: the
    cut took back a batch never committed to Kafka (its process was killed between the append and the commit,
    an ambiguous_commit), and the restarted stream resumes at its group's commit, which is where its sink
    stores (a live stream would still realign on its next batch, with a row)."""
    out = []
    for index, m in enumerate(cut_moves):
        for (topic, partition), (before, after) in m.moves.items():
            rows = [h for h in history.get(m.stream, []) if (h.topic, h.partition) == (topic, partition)
                    and h.changed_at.timestamp() >= m.at - 0.5]
            first = rows[0] if rows else None
            later = [c for c in cut_moves[index + 1:] if c.stream == m.stream and (topic, partition) in c.moves
                     and (first is None or c.at - 0.5 <= first.changed_at.timestamp())]
            if later:
                continue   # cut again before the stream noticed (a rebalance, a long batch): the later cut is judged
            at_commit = first is None and (m.committed or {}).get((topic, partition)) == after
            ok = at_commit or (first is not None and (first.status.value != "realigned" or first.offset == after))
            if not ok:
                seen = None if first is None else (first.status.value, first.previous_offset, first.offset)
                out.append(f"{m.stream} {topic}:{partition}: a file cut took the stored offset {before} -> {after}; "
                           f"the first history row after it: {seen}")
    return out
