"""The offset gate: one state machine that owns every offset change of a running stream.

A change of one partition lives from the call to its record in the history:

    REQUESTED ──▶ WAITING ──▶ MOVED ──▶ PERSISTED ──▶ RECORDED
        │            │  ▲        │
        │            │  └────────┘ (the persist failed: moved back, or withheld, and retried)
        ▼            ▼
    SUPERSEDED / CANCELLED

- REQUESTED: handed to the gate (drained by the poll thread).
- WAITING: for the partition's assignment, or for a retry after a failed persist.
- MOVED: the consumer reads the partition from the target (seek, or an assign at that offset).
- PERSISTED: the target is committed to the group (exactly-once: stored in the sink, the truth a restart
  resumes from). Only now is the change applied; a persist that fails moves the consumer back to where it
  was, so a change is never half applied (nothing is delivered from a target that a restart would forget); one
  that stood at a raw start (nothing stored or committed) is withheld instead: nothing of it delivered until then.
- RECORDED: reported to whoever writes the history (the host).
- SUPERSEDED: a later call moved the same partition first (the last call wins).
- CANCELLED: cancelled before it was persisted; it is never applied later.

The gate's transitions are the only place where a partition's status is decided. It runs on the stream's
poll thread, called at the worker's seams (drain, on_assign, on_revoke, after a batch), and drives the
consumer through a small port, so the same code runs against a simulated consumer in the model test.

Why a seek is not always enough (KIP-848 and cooperative groups), from librdkafka's source
(src/rdkafka_partition.c, rd_kafka_toppar_seek): a seek on a partition whose fetcher has started is safe
(in the offset-query state it aborts the pending committed-offset lookup, and the new version barrier
makes a late lookup answer outdated); on one not started yet it fails with _STATE. An incremental
assignment is served asynchronously, after incremental_assign() returned, and starts the partition from
the committed offset it then looks up. So a partition counts as settled only once it was assigned at an
explicit offset or has delivered a message; an unsettled one is moved by re-assigning it at the target
(an explicit start needs no lookup), and the first delivery after every move is checked against the
target: a stale one is dropped and the partition moved again (the check librdkafka issue #2256 advises).

An onward target - "the end" (`latest`, a request beyond the log end clamped to it, a time after every record)
or "on from here" (`+N`) - was computed from the log end or the position as the call read them; the stream
keeps consuming until the change reaches the gate, so by then the partition may stand past it. Moving it back
would deliver (exactly-once: write) again what it already delivered, a rewind nobody asked for; like a seek to
the end, such a move never goes backward: the partition stays where it got to, and that is what is persisted
and reported. An explicit target (an offset, a time's record, another group's, committed, `-N`) is kept
exact, rewind or not.

Several members (change_marks.py): a partition another member held comes back where the group committed it (or,
exactly-once, where the sink stores it); a waiting onward change is judged against that, and the history says
the partition moved from there. What this gate persists carries a ChangeMark (the change id, target and origin);
a change whose partition arrives carrying its mark (or a later change's) was persisted before by a process
whose host died before recording it: it is reported as applied where the mark says (or superseded), never
applied again. A mark is believed only when it is this stream's and authentic (change_marks.MarkKey, checked
by whoever reads the commit): a foreign one reaches the gate as no mark at all. A raw librdkafka constant (OFFSET_BEGINNING, -2, for an exactly-once partition the sink stores
nothing of) is a start the gate hands to the consumer, never a position or a previous offset it reports.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Protocol

from ...model import GateEvent, MoveState, PartitionKey, PendingMove
from .change_marks import ChangeMark, Committed
from .gate_moves import GatePartition as _Partition
from .gate_moves import Move as _Move

PERSIST_RETRY_S = 0.5   # between retries of a change whose persist failed
EARLY_DELIVERY_S = 1.0  # after a move, batches are cut early until each moved partition delivered, at most this long


class ConsumerPort(Protocol):
    """What the gate needs of the consumer (poll thread only)."""
    def seek(self, tp: PartitionKey, offset: int) -> bool:
        """Move a fetching partition; False when the consumer cannot seek it now."""
    def reassign(self, tp: PartitionKey, offset: int | None) -> None:
        """Assign the partition again at `offset` (None: where the group or the sink says it resumes)."""
    def persist(self, offsets: Mapping[PartitionKey, int], marks: Mapping[PartitionKey, ChangeMark]) -> str | None:
        """Commit (exactly-once: store in the sink) the offsets, each with the mark of the change it comes from
        (carried by every later commit of the partition too); None when done, else what failed and why."""


class OffsetGate:
    """Why this class is this big: it is the one state machine of the module docstring, and its transitions are the
    only place a partition's status is decided; split, they would be read in several places."""

    def __init__(self, port: ConsumerPort, report: Callable[[GateEvent], None], *,
                 pending: Mapping[PartitionKey, PendingMove] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self._port, self._report, self._clock = port, report, clock
        self._moves: dict[PartitionKey, _Move] = {tp: _Move(p.change_id, tp, p.offset, MoveState.WAITING,
                                                             onward=p.onward)
                                                   for tp, p in (pending or {}).items()}
        self._assigned: dict[PartitionKey, _Partition] = {}
        self._lock = threading.Lock()   # guards the views other threads read (snapshot)
        # on_assign → after_assign: where a moved one would start
        self._assign_origins: dict[PartitionKey, int | None] = {}
        self._undelivered: dict[PartitionKey, float] = {}   # moved, not delivered from yet: until when to hurry
        self._cancelled_up_to = 0   # a call the host cancelled before its offsets got here is cancelled on arrival
        self._forgotten: set[tuple[int, PartitionKey]] = set()   # persisted by another task before its call got here

    @property
    def moved(self) -> bool:
        """A change was just applied and a moved partition has not delivered from its target yet: deliver
        batches as soon as the consumer's queue drains, not at batch_interval_ms (a partition whose fetch was in
        flight during the move comes a little later than the others)."""
        if self._undelivered:
            now = self._clock()
            for tp in [tp for tp, until in self._undelivered.items() if until <= now]:
                del self._undelivered[tp]
        return bool(self._undelivered)

    # -- what other threads read ------------------------------------------------
    def assigned(self) -> frozenset:
        with self._lock:
            return frozenset(self._assigned)

    def positions(self) -> dict[PartitionKey, int]:
        with self._lock:
            return {tp: p.position for tp, p in self._assigned.items() if p.position is not None}

    def waiting(self) -> dict[PartitionKey, int]:
        with self._lock:
            return {tp: m.offset for tp, m in self._moves.items()}

    def forget(self, change_id: int, tps: Iterable[PartitionKey]) -> None:
        """Another task of the stream persisted change `change_id` on `tps` (any thread, at once: not queued
        behind a batch, so it lands before the partitions can reach this task): drop it here unreported; a call
        still on its way here is dropped on `tps` when it arrives (its mark there may be gone: another host's)."""
        with self._lock:
            for tp in tps:
                move = self._moves.get(tp)
                if move is not None and move.change_id == change_id and move.state == MoveState.WAITING:
                    del self._moves[tp]
                elif move is None or move.change_id < change_id:
                    self._forgotten.add((change_id, tp))

    # -- seams (poll thread) ----------------------------------------------------
    def request(self, change_id: int, offsets: Mapping[PartitionKey, int],
                onward: Collection[PartitionKey] = (), supersedes: int | None = None) -> None:
        """A call's offsets arrive (drain): the last call wins per partition; assigned ones move now (and are
        persisted together: one commit, or one sink write, for the call). The partitions of `onward` never move
        back from where they got to. `supersedes` (a revert's): the change it reverts, whose moves still waiting
        end superseded, whichever partitions they are on."""
        ready = []
        for move in [m for m in list(self._moves.values()) if supersedes is not None and m.change_id == supersedes]:
            self._finish(move, MoveState.SUPERSEDED)
        if change_id <= self._cancelled_up_to:
            for tp, offset in offsets.items():
                self._emit(_Move(change_id, tp, offset, MoveState.CANCELLED))
            return
        with self._lock:
            forgotten = {tp for c, tp in self._forgotten if c == change_id}
            self._forgotten = {(c, tp) for c, tp in self._forgotten if c > change_id}
        for tp, offset in offsets.items():
            old = self._moves.get(tp)
            if old is not None:
                self._finish(old, MoveState.SUPERSEDED)
            if tp in forgotten:   # another task persisted it there (forget came first): never applied again
                continue
            move = _Move(change_id, tp, offset, onward=tp in onward)
            with self._lock:
                self._moves[tp] = move
            self._emit(move)
            self._to(move, MoveState.WAITING)
            part = self._assigned.get(tp)
            if part is not None and part.mark is not None and part.mark.about(change_id):
                # another task of the stream persisted it (or a later change) before this call reached this one
                self._persisted_before(move, part.mark)
            elif part is not None:
                ready.append(move)
        self._apply(ready)

    def cancel(self, up_to: int | None = None) -> list[GateEvent]:
        """Cancel every change not persisted yet (of the calls up to change id `up_to`, whose offsets may still be
        on their way: they are cancelled when they arrive); the cancelled ones."""
        self._cancelled_up_to = max(self._cancelled_up_to, up_to or 0)
        return [self._finish(move, MoveState.CANCELLED) for move in list(self._moves.values())
                if up_to is None or move.change_id <= up_to]

    def abandon(self, change_id: int) -> None:
        """The host could not record change `change_id` (its persist was refused meanwhile, so it waits or was
        moved back): its moves end, never applied (CANCELLED: the host keeps no row of it)."""
        for move in [m for m in list(self._moves.values()) if m.change_id == change_id]:
            self._finish(move, MoveState.CANCELLED)

    def reconcile(self, committed: Mapping[PartitionKey, Committed]) -> None:
        """At the start of a stream process: the changes it was handed whose partitions' commits carry their
        mark (or a later change's) were persisted by an earlier process, whose record was lost: recorded now,
        never applied again."""
        for tp, seen in committed.items():
            move = self._moves.get(tp)
            if move is not None and seen.mark is not None and seen.mark.about(move.change_id):
                self._persisted_before(move, seen.mark)

    def on_assign(self, starts: Mapping[PartitionKey, int | None],
                  committed: Mapping[PartitionKey, Committed] | None = None) -> dict[PartitionKey, int | None]:
        """Partitions arrive: the offset each is to be assigned at (a waiting change's target, else `starts`'s:
        None for where the group resumes, a raw constant such as OFFSET_BEGINNING passed through). `committed`:
        the group's committed offset and change mark (ours only) of every partition assigned: where those
        assigned where the group resumes (None) stand, and which change of this stream was persisted last on
        each (a call that reaches this task after another task applied it is recorded, not applied again).
        Call after_assign() once the consumer has them."""
        out: dict[PartitionKey, int | None] = {}
        self._assign_origins = {}
        committed = committed or {}
        with self._lock:
            for tp, start in starts.items():
                known = start if start is not None and start >= 0 else None
                seen = committed.get(tp, Committed())
                # where the partition really stands: the group's commit only where the stream resumes from it
                # (None start); a raw constant is a sink that stores nothing of it (exactly-once after a sink
                # change: where it stood is the old sink's, which the host's plan holds), not the group's commit
                where = known if known is not None or start is not None else seen.offset
                self._assigned[tp] = _Partition(position=where, settled=known is not None, mark=seen.mark,
                                                raw_start=start is not None and start < 0)
        for tp, start in starts.items():
            move = self._moves.get(tp)
            seen = committed.get(tp, Committed())
            if move is not None and seen.mark is not None and seen.mark.about(move.change_id):
                self._persisted_before(move, seen.mark)
                move = None
            if move is not None:
                part = self._assigned[tp]
                origin = part.position   # where it stands (above)
                _not_back(move, origin)
                self._to(move, MoveState.MOVED)
                self._assign_origins[tp] = origin
                with self._lock:
                    part.position, part.settled, part.expect = move.offset, True, (move.offset, None)
                out[tp] = move.offset
            else:
                out[tp] = start
        return out

    def after_assign(self) -> None:
        """Persist the changes on_assign moved; one whose persist fails goes back to where it would start."""
        origins, self._assign_origins = self._assign_origins, {}
        moved = [(move, origin) for move, origin in ((self._moves.get(tp), origin) for tp, origin in origins.items())
                 if move is not None and move.state == MoveState.MOVED]
        self._persist(moved)

    def assign_failed(self, tps: Iterable[PartitionKey]) -> None:
        """The consumer refused the partitions on_assign prepared: their changes wait again."""
        self._assign_origins = {}
        self.on_revoke(tps)
        for tp in tps:
            move = self._moves.get(tp)
            if move is not None and move.state == MoveState.MOVED:
                self._to(move, MoveState.WAITING)

    def on_revoke(self, tps: Iterable[PartitionKey]) -> None:
        """Partitions leave: what this consumer knew of them is forgotten; their changes wait again."""
        with self._lock:
            for tp in tps:
                self._assigned.pop(tp, None)
                self._undelivered.pop(tp, None)

    def retry(self) -> None:
        """Between batches: retry the changes whose persist failed, when due."""
        now = self._clock()
        self._apply([move for move in list(self._moves.values())
                     if move.state == MoveState.WAITING and move.reason is not None and move.tp in self._assigned
                     and now >= move.retry_at])

    def check_delivery(self, tp: PartitionKey, offset: int) -> bool:
        """Is a consumed message of `tp` at `offset` to be delivered? False for one the consumer fetched from
        before the last move (a seek the committed-offset lookup overrode): the partition is moved again."""
        part = self._assigned.get(tp)
        if part is None or part.withheld:
            return False   # not ours (revoked inside this consume), or withheld until its move is retried
        if part.expect is not None:
            target, origin = part.expect
            stale = offset < target or (origin is not None and origin > target and offset >= origin)
            if stale:
                self._port.reassign(tp, target)
                return False
            part.expect = None
        part.settled = True
        self._undelivered.pop(tp, None)
        return True

    def lets_through(self, tps: Iterable[PartitionKey]) -> bool:
        """Would check_delivery let every record of `tps` through and change nothing (each assigned and settled,
        no move's first record expected, none waiting to deliver from a move)? The poll thread then takes a whole
        consume() without asking per partition (worker)."""
        assigned, undelivered = self._assigned, self._undelivered
        for tp in tps:
            part = assigned.get(tp)
            if part is None or part.expect is not None or not part.settled or part.withheld or tp in undelivered:
                return False
        return True

    def after_batch(self, next_offsets: Mapping[PartitionKey, int]) -> None:
        """A batch was written (its commit is the worker's): the stream stands after it."""
        with self._lock:
            for tp, offset in next_offsets.items():
                part = self._assigned.get(tp)
                if part is not None:
                    part.position = offset

    def rewound(self, first_offsets: Mapping[PartitionKey, int]) -> None:
        """A failed batch was sought back to its first offsets."""
        self.after_batch(first_offsets)

    def lost_consumer(self) -> None:
        with self._lock:
            self._assigned.clear()

    # -- transitions --------------------------------------------------------------
    def _apply(self, moves: list[_Move]) -> None:
        """WAITING → MOVED → PERSISTED on assigned partitions, persisted together."""
        moved = []
        for move in moves:
            part = self._assigned[move.tp]
            origin = part.position
            _not_back(move, origin)
            if not (part.settled and self._port.seek(move.tp, move.offset)):
                self._port.reassign(move.tp, move.offset)
            with self._lock:
                part.position, part.settled, part.expect, part.withheld = move.offset, True, (move.offset, origin), False
            self._to(move, MoveState.MOVED)
            moved.append((move, origin))
        self._persist(moved)

    def _persisted_before(self, move: _Move, mark: ChangeMark) -> None:
        """The partition arrives carrying the mark of this change (or of a later one): a process of this stream
        persisted it before and its record was lost (its host died in between). Reported applied where the mark
        says, never applied again; a change a later one followed is superseded."""
        if mark.change_id > move.change_id:
            self._finish(move, MoveState.SUPERSEDED)
            return
        move.offset = mark.offset
        move.reason = _joined(move.note, "persisted before its record was written (the commit carries change "
                                         f"{mark.change_id}); recorded now, not applied again")
        self._to(move, MoveState.PERSISTED, previous=mark.previous)
        self._finish(move, MoveState.RECORDED)

    def _persist(self, moved: list[tuple[_Move, int | None]]) -> None:
        """Persist moved changes in one go; if that fails, each is moved back and waits for a retry."""
        if not moved:
            return
        error = self._port.persist({move.tp: move.offset for move, _ in moved},
                                   {move.tp: ChangeMark(move.change_id, move.offset, origin)
                                    for move, origin in moved})
        for index, (move, origin) in enumerate(moved):
            if error is not None:
                part = self._assigned.get(move.tp)
                # moved back: nothing is delivered from a target a restart would forget; one at a raw start is
                # withheld (read from there meanwhile it would write the log again: a refused sink carry-over)
                withheld = origin is None and part is not None and part.raw_start
                if part is not None:
                    if not withheld and not (origin is not None and part.settled and self._port.seek(move.tp, origin)):
                        self._port.reassign(move.tp, origin)
                    with self._lock:
                        part.position, part.settled, part.expect = origin, origin is not None or withheld, None
                        part.withheld = withheld
                move.reason = (f"{error}; not read meanwhile (it stood at no offset to go back to), retried until it "
                               f"succeeds" if withheld else f"{error}; moved back, retried until it succeeds")
                move.retry_at = self._clock() + PERSIST_RETRY_S
                self._to(move, MoveState.WAITING)
                continue
            move.reason = move.note   # PERSISTED: why it went elsewhere than its target, if it did
            if move.tp in self._assigned:
                self._undelivered[move.tp] = self._clock() + EARLY_DELIVERY_S
                self._assigned[move.tp].mark = ChangeMark(move.change_id, move.offset, origin)
            self._to(move, MoveState.PERSISTED, previous=origin, more=index < len(moved) - 1)
            self._finish(move, MoveState.RECORDED)

    def _to(self, move: _Move, state: MoveState, previous: int | None = None, more: bool = False) -> None:
        move.state = state
        self._emit(move, previous, more)

    def _finish(self, move: _Move, state: MoveState) -> GateEvent:
        move.state = state
        with self._lock:
            if self._moves.get(move.tp) is move:
                del self._moves[move.tp]
        part = self._assigned.get(move.tp)
        if part is not None and part.withheld:   # its change ended unapplied: read from where it starts after all
            part.withheld, part.settled = False, False
            self._port.reassign(move.tp, None)
        return self._emit(move)

    def _emit(self, move: _Move, previous: int | None = None, more: bool = False) -> GateEvent:
        event = GateEvent(change_id=move.change_id, topic=move.tp[0], partition=move.tp[1], offset=move.offset,
                          state=move.state, previous_offset=previous, reason=move.reason,
                          more=more)
        self._report(event)
        return event


def _not_back(move: _Move, where: int | None) -> None:
    """An onward move whose partition already stands past its target stays where it stands."""
    if move.onward and where is not None and where > move.offset:
        move.note = (f"the partition already stood at {where}, past {move.offset} (computed when the call "
                     f"was made): a move to the end or onward never goes back, it stays at {where}")
        move.offset = where


def _joined(*parts: str | None) -> str:
    return "; ".join(p for p in parts if p)
