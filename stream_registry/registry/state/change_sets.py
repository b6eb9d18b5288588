"""The host's side of offset changes: change sets, from a call to its record in the history.

One call of set_offset (or revert) is one change set: its partitions share one
change id, in the pending rows and then in the history. The SQLite row is the
only truth about a change: pending while its row is in `pending_changes`,
applied once its history row exists; gone without one, it was superseded (a
later call moved the partition first: the gate says so, or a stopped stream's
newer call replaced it) or cancelled. A cancel, and a revert's superseding of
the change it reverts, end the rows in the state store first (`ended`), before
any stream process hears of it: from then on they are never pending and never
handed to a stream process, and the process's gate drops them whenever it hears.
A row a revert superseded becomes a `superseded` history row. Nothing about a
pending change is kept in memory; what waits in memory is only history a busy
state store has not taken yet (retried, and shown in the stream's error).

The stream's offset gate (offset_gate.py) reports what became of each partition
(GateEvent); this module records it and wakes the callers that wait, never
while holding a stream's lock.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from ...errors import ConfigError, OffsetSpecError, StreamError, StreamStateError
from ...model import (
    ChangeStatus,
    GateEvent,
    HistoryEntry,
    MoveState,
    OffsetChange,
    PartitionKey,
    PendingMove,
    PendingOffset,
    Realignment,
    RecordsLost,
    ResolvedOffset,
    SetAside,
)
from ...offset_spec import Absolute, OffsetSpec
from .state_store import PlannedRow, StateStore

log = logging.getLogger("mgstreams.registry")
OFFSET_CHANGES = (ChangeStatus.APPLIED, ChangeStatus.CLAMPED,   # history rows that are offset changes
                  ChangeStatus.REALIGNED)
NOT_RUNNING = "stream is not running; applied at the first assignment after start"
NOT_ASSIGNED = "not assigned to this stream's consumer yet (rebalance pending); applied when the group assigns it"


class ChangeSets:
    def __init__(self, store: StateStore):
        self._store = store
        self._changed = threading.Condition()
        self._unrecorded: dict[str, list[GateEvent | SetAside | RecordsLost]] = {}   # per stream: what the store has not taken
        self._store_errors: dict[str, str] = {}
        self._record_lock = threading.Lock()
        self._watchers: list[Callable[[str | None], None]] = []

    # -- calls ------------------------------------------------------------------
    def open(self, name: str, plan: Sequence[ResolvedOffset], note: str | None, running: bool,
             replaces: int | None = None, sink_change: bool = False,
             before_commit: Callable[[int], None] | None = None) -> int:
        """Record a call's plan as pending rows of one new change; its change id. A running stream's gate
        says what became of an earlier change of the same partitions; a stopped stream's is superseded now.
        `replaces`: the change a revert reverts; its rows still pending (partitions another member held) end
        superseded with it, recorded so in the history (a running stream's once its gate dropped them).
        `sink_change`: the plan is where an alter's new sink starts (sink_change.py), part of the alter: a cancel
        refuses while it is pending (cancel()). `before_commit(change_id)`: run once the rows are written, before
        their transaction commits (state_store.add_change): the hand-off that overlaps the commit's fsync."""
        unresolved = [f"{r.topic}:{r.partition}" for r in plan if r.offset is None]
        if unresolved:   # the registry refuses a spec with a failed partition before it opens a change
            raise OffsetSpecError(f"offset: no offset resolved for {', '.join(unresolved)}")
        rows = [PlannedRow(r.topic, r.partition, r.offset, r.previous_offset, r.clamped,
                           _joined(note, r.message), r.onward) for r in plan if r.offset is not None]
        change_id = self._store.add_change(name, rows, supersede=not running, replaces=replaces,
                                           sink_change=sink_change, before_commit=before_commit)
        log.info("stream %s: change %d requested%s: %s%s", name, change_id, f" ({note})" if note else "",
                 _moves((r.topic, r.partition, r.previous_offset, r.offset) for r in plan),
                 "" if running else " (stream not running: pending until it starts)")
        self.notify(name)   # a waiter whose partitions this call supersedes
        return change_id

    def wait(self, name: str, change_id: int, deadline: float, running: Callable[[], bool]) -> None:
        """Until no row of the change is pending any more, the deadline (time.monotonic()), or its stream stops."""
        with self._changed:
            while running() and self._store.pending_rows(name, change_id):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._changed.wait(min(left, 0.5))

    def outcome(self, name: str, change_id: int, resolved: Sequence[ResolvedOffset], running: bool
                ) -> list[OffsetChange]:
        """What became of each partition of the call, read from the state store (so it never contradicts the
        history): applied/clamped with the history's message, pending with why, superseded or cancelled."""
        self.flush(name)
        applied = {PartitionKey(h.topic, h.partition): h for h in self._store.history_change(name, change_id)}
        pending = {PartitionKey(p.topic, p.partition): p for p in self._store.pending_rows(name)}
        mine = {PartitionKey(p.topic, p.partition): p for p in self._store.pending_rows(name, change_id)}
        out = []
        for r in resolved:
            tp = PartitionKey(r.topic, r.partition)
            if r.unchanged:
                out.append(OffsetChange(topic=r.topic, partition=r.partition, previous_offset=r.previous_offset,
                                        offset=r.offset, status=ChangeStatus.UNCHANGED,
                                        message=r.message))
            elif tp in applied:
                h = applied[tp]
                out.append(OffsetChange(topic=h.topic, partition=h.partition, previous_offset=h.previous_offset,
                                        offset=h.offset, status=h.status, message=h.message or "",
                                        change_id=change_id))
            elif tp in mine:
                p = mine[tp]
                why = NOT_RUNNING if not running else p.reason or NOT_ASSIGNED
                out.append(OffsetChange(topic=r.topic, partition=r.partition, previous_offset=r.previous_offset,
                                        offset=r.offset, status=ChangeStatus.PENDING,
                                        message=_joined(p.message, why), change_id=change_id))
            else:
                later = self._later_change(name, change_id, tp, pending)
                out.append(OffsetChange(topic=r.topic, partition=r.partition, previous_offset=r.previous_offset,
                                        offset=r.offset,
                                        status=ChangeStatus.SUPERSEDED if later else ChangeStatus.CANCELLED,
                                        message=_joined(r.message, f"superseded by change {later}" if later else
                                                "cancelled before it was applied"), change_id=change_id))
        return out

    def _later_change(self, name: str, change_id: int, tp: PartitionKey,
                      pending: Mapping[PartitionKey, PendingOffset]) -> int | None:
        """The id of a later change of the partition (pending or applied), if any."""
        if tp in pending and (pending[tp].change_id or 0) > change_id:
            return pending[tp].change_id
        later = [h.change_id for h in self._store.history(name) if (h.topic, h.partition) == tp
                 and h.change_id is not None and h.change_id > change_id and h.status in OFFSET_CHANGES]
        return min(later) if later else None

    def revert_spec(self, name: str, change_id: int, partitions: Iterable | None) -> tuple[OffsetSpec, str]:
        """The spec that moves every partition of change `change_id` (or those of `partitions`: numbers, or
        "topic:partition") back to its previous offset, and the note its history rows will carry."""
        if isinstance(change_id, bool) or not isinstance(change_id, int) or change_id <= 0:
            raise ConfigError(f"change_id: must be a positive integer (a history row's change_id), "
                              f"got {change_id!r}")
        self.flush(name)
        rows = self._store.history_change(name, change_id)
        if not rows:
            raise ConfigError(f"change_id: no change {change_id} in the history of stream {name!r}")
        rows = [r for r in rows if r.status in OFFSET_CHANGES] or rows   # not its rows a revert superseded
        if rows[0].status not in OFFSET_CHANGES:
            r = rows[0]
            raise ConfigError(f"change_id: change {change_id} is a poison message set aside ({r.status.value} "
                              f"at {r.topic}:{r.partition}@{r.offset}), not an offset change; it cannot be reverted")
        rows = _chosen(rows, partitions, change_id)
        missing = [r for r in rows if r.previous_offset is None]
        if missing:
            where = ", ".join(f"{r.topic}:{r.partition} to {r.offset}" for r in missing)
            raise ConfigError(f"change_id: change {change_id} ({where}) has no previous offset (the partition had "
                              f"none when it was applied); there is nothing to revert to"
                              + ("; name the other partitions with `partitions`" if len(missing) < len(rows) else ""))
        spec = OffsetSpec(partitions={PartitionKey(r.topic, r.partition): Absolute(r.previous_offset) for r in rows
                                      if r.previous_offset is not None})   # none is missing: refused above
        return spec, f"revert of change {change_id}"

    def last_change(self, name: str) -> int:
        return self._store.last_change_id(name)

    def cancel(self, name: str, up_to: int, running: bool) -> list[PendingOffset]:
        """End the stream's pending rows of changes up to `up_to` (a call after the cancel is not cancelled), in
        the state store before anything else: a stopped stream's go; a running stream's stay marked cancelled
        (never pending, never handed to a stream process again) until its gate confirms (cancelled()). The
        rows, the latest of each partition. A sink change's carry-over (where an alter's new sink starts) is
        part of the alter, not a call of its own: while it is pending the cancel refuses (StreamStateError) and
        changes nothing; cancelled, an exactly-once stream's new sink would store no offsets and be filled again
        from each partition's log start."""
        self.flush(name)
        in_flight = self._store.sink_change_rows(name, up_to)
        if in_flight:
            ids = ", ".join(str(i) for i in sorted({r.change_id for r in in_flight if r.change_id}))
            raise StreamStateError(
                f"name: stream {name!r} has a sink change in flight (change {ids}: "
                f"{_moves((r.topic, r.partition, r.previous_offset, r.offset) for r in in_flight)}); it is part "
                f"of the alter that changed the sink and cannot be cancelled (the new sink would start each "
                f"partition from its log start); nothing was cancelled. Cancel once it is applied (see the "
                f"history), or alter the sink again")
        rows = self._store.take_pending(name, up_to, mark_only=running)
        if rows and not running:
            self._log_cancelled(name, rows)
        self.notify(name)
        return rows

    def cancelled(self, name: str, rows: list[PendingOffset], confirmed: list[GateEvent] | None,
                  up_to: int) -> list[PendingOffset]:
        """After the running stream's gate heard the cancel (`confirmed`: what it cancelled; None: not within the
        call's timeout, it is inside a batch): what was cancelled. One the gate persisted before it heard (its
        assignment came first) was recorded first (one ordered pipe) and is in the history, not here. Unconfirmed
        rows stay marked until the gate reports them cancelled (it drains the request before anything else) or
        the stream starts again: either way they are never applied."""
        self.flush(name)
        rows = self._store.not_applied(name, rows)
        if confirmed is not None:
            self._store.drop_cancelled(name, up_to)
        else:
            why = "cancelled; the stream process, busy with a batch, drops it before anything else it does next"
            rows = [replace(r, reason=why) for r in rows]
        self._log_cancelled(name, rows)
        self.notify(name)
        return rows

    def _log_cancelled(self, name: str, rows: list[PendingOffset]) -> None:
        if rows:
            ids = sorted({r.change_id for r in rows if r.change_id})
            log.info("stream %s: change%s %s cancelled: %s", name, "s" if len(ids) > 1 else "",
                     ", ".join(map(str, ids)),
                     _moves((r.topic, r.partition, r.previous_offset, r.offset) for r in rows))

    # -- what the stream reports ------------------------------------------------------
    def on_event(self, name: str, event: GateEvent) -> None:
        """A gate event from the stream's poll thread (or its pipe's reader): record it, wake the waiters. The
        partitions of one persist (`more` on all but the last) are recorded in one transaction."""
        if event.state == MoveState.PERSISTED:
            self._unrecorded.setdefault(name, []).append(event)
            if event.more:
                return
            self.flush(name)
        else:
            try:
                if event.state in (MoveState.SUPERSEDED, MoveState.CANCELLED):
                    self._store.drop_pending(name, event.change_id, event.topic, event.partition)
                    log.info("stream %s: change %d %s on %s:%d", name, event.change_id,
                             "superseded" if event.state == MoveState.SUPERSEDED else "cancelled (confirmed)",
                             event.topic, event.partition)
                elif event.state == MoveState.WAITING:
                    self._store.set_reason(name, event.change_id, event.topic, event.partition, event.reason)
            except StreamError as exc:
                log.warning("stream %s: %s", name, exc)
        self.notify(name)

    def on_realign(self, name: str, moves: list[Realignment]) -> None:
        """An exactly-once stream resumed where its sink stores rather than where it stood: one history row per
        partition (one change id), and a warning in the log saying from where to where and why."""
        if not moves:
            return
        try:
            change_id = self._store.record_realigned(name, moves)
        except StreamError as exc:
            log.warning("stream %s: %s (realignment not recorded)", name, exc)
            return
        for reason in dict.fromkeys(m.reason for m in moves):
            log.warning("stream %s: change %d realigned to the sink: %s (%s)", name, change_id,
                        _moves((m.topic, m.partition, m.previous_offset, m.offset) for m in moves
                               if m.reason == reason), reason)
        self.notify(name)

    def on_set_aside(self, name: str, records: list[SetAside]) -> None:
        """Poison messages go to the history too: a skipped one is recorded nowhere else."""
        self._unrecorded.setdefault(name, []).extend(records)
        self.flush(name)

    def on_lost(self, name: str, lost: RecordsLost) -> None:
        """Records that left the log before the stream read them: a history row (from where to where)."""
        self._unrecorded.setdefault(name, []).append(lost)
        self.flush(name)

    def lost_counts(self, name: str) -> dict[str, int]:
        """StreamInfo's records_lost and records_lost_unacknowledged."""
        total, unacknowledged = self._store.lost_totals(name)
        return {"records_lost": total, "records_lost_unacknowledged": unacknowledged}

    def records_lost(self, name: str) -> dict[PartitionKey, int]:
        self.flush(name)
        return self._store.lost_per_partition(name)

    def acknowledge_loss(self, name: str) -> int:
        self.flush(name)
        return self._store.acknowledge_loss(name)

    def flush(self, name: str) -> None:
        """Write what waits for the state store, in order; on failure it waits on and the error is kept."""
        with self._record_lock:
            rows = list(self._unrecorded.get(name, ()))
            if not rows:
                return
            try:
                for group in _runs(rows):
                    if isinstance(group[0], GateEvent):
                        self._store.record_applied(name, group)
                        for change_id in sorted({e.change_id for e in group}):
                            moves = [(e.topic, e.partition, e.previous_offset, e.offset) for e in group
                                     if e.change_id == change_id]
                            log.info("stream %s: change %d applied: %s", name, change_id, _moves(moves))
                    elif isinstance(group[0], RecordsLost):
                        self._store.record_lost(name, group)
                    else:
                        self._store.record_set_aside(name, group)
                    del self._unrecorded[name][:len(group)]
            except StreamError as exc:
                self._store_errors[name] = f"{exc} (offset history kept in memory, retried)"
                log.warning("stream %s: %s", name, self._store_errors[name])
                return
            self._store_errors.pop(name, None)

    def store_error(self, name: str) -> str | None:
        return self._store_errors.get(name)

    def forget(self, name: str) -> None:
        self._unrecorded.pop(name, None)
        self._store_errors.pop(name, None)

    def pending_moves(self, name: str) -> dict[PartitionKey, PendingMove]:
        """What a stream starting now is handed: the latest pending change of each partition (earlier ones a
        stream that ended never reported on are superseded)."""
        self._store.drop_superseded(name)
        return {PartitionKey(p.topic, p.partition): PendingMove(change_id=p.change_id, offset=p.offset,
                                                                onward=p.onward)
                for p in self._store.pending_rows(name) if p.change_id is not None}   # a pending row has one

    def history(self, name: str, limit: int | None) -> list[HistoryEntry]:
        self.flush(name)
        return self._store.history(name, limit)

    def unsettled(self, name: str, change_ids: Iterable[int]) -> set[int]:
        """Those of `change_ids` that still have a pending row (one query for any number of waiting calls)."""
        wanted = set(change_ids)
        return wanted & self._store.pending_change_ids(name) if wanted else set()

    def watch(self, callback: Callable[[str | None], None]) -> Callable[[], None]:
        """Call `callback(stream name or None)` at every notify; the function that stops it."""
        self._watchers.append(callback)

        def unwatch() -> None:
            if callback in self._watchers:
                self._watchers.remove(callback)
        return unwatch

    def notify(self, name: str | None = None) -> None:
        """Wake the calls waiting for changes of stream `name` (None: of every stream)."""
        with self._changed:
            self._changed.notify_all()
        for callback in list(self._watchers):
            callback(name)


def _moves(moves: Iterable[tuple[str, int, int | None, int | None]], most: int = 8) -> str:
    """`orders:0 120 -> 100, orders:1 (none) -> 100` for a log line; past `most` partitions, a count."""
    moves = list(moves)
    shown = ", ".join(f"{t}:{p} {'(none)' if before is None else before} -> {after}"
                      for t, p, before, after in moves[:most])
    return shown + (f" and {len(moves) - most} more partition(s)" if len(moves) > most else "")


def _joined(*parts: str | None) -> str:
    return "; ".join(p for p in parts if p)


def _chosen(rows: list[HistoryEntry], partitions: Iterable | None, change_id: int) -> list[HistoryEntry]:
    if partitions is None:
        return rows
    if isinstance(partitions, (str, bytes)) or not isinstance(partitions, Iterable):
        raise ConfigError(f"partitions: expected a list of partition numbers or 'topic:partition', got {partitions!r}")
    chosen, seen = [], {(r.topic, r.partition) for r in rows}
    for item in partitions:
        match = [r for r in rows if _names(item, r)]
        if isinstance(item, bool) or not match:
            raise ConfigError(f"partitions: {item!r} is not a partition of change {change_id} "
                              f"({', '.join(f'{t}:{p}' for t, p in sorted(seen))})")
        chosen += [r for r in match if r not in chosen]
    if not chosen:
        raise ConfigError("partitions: empty; name at least one partition of the change, or leave it out")
    return chosen


def _names(item, row: HistoryEntry) -> bool:
    if isinstance(item, int) and not isinstance(item, bool):
        return row.partition == item
    if isinstance(item, str) and ":" in item:
        topic, _, partition = item.rpartition(":")
        return topic == row.topic and partition.isdigit() and int(partition) == row.partition
    return False


def _runs(rows: list) -> list[list]:
    """Consecutive rows of one kind (applied changes, set-aside messages), grouped (order kept)."""
    out: list[list] = []
    for row in rows:
        if out and type(out[-1][0]) is type(row):
            out[-1].append(row)
        else:
            out.append([row])
    return out
