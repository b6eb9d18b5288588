"""The registry's offset calls (OffsetCalls), and one set_offset or revert call after its hand-off (OffsetCall).

The registry plans a call, records it as a pending change and hands it to the
stream's gate under the stream's lock; the wait for its outcome is the caller's.
An in-process caller waits on a condition (ChangeSets.wait); the host awaits it
on its event loop (mgstreams.host.waits), holding no thread. Either way the wait
ends at `deadline` (counted from the call's arrival), when no row of the change
is pending any more, or when its stream no longer runs (`live`), and `answer()`
then reads what became of each partition from the state store.
"""
from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from ...errors import ConfigError, StreamStateError
from ...model import (
    CHECK_TIMEOUT_MS,
    DEFAULT_TIMEOUT_MS,
    MAX_CHECK_LIMIT,
    ChangeStatus,
    HistoryEntry,
    OffsetChange,
    PartitionKey,
    PartitionOffsets,
    PendingOffset,
    PreviewStatement,
    ResolvedOffset,
)
from ...offset_spec import OffsetSpec, parse_offset_spec
from ..runners.engine import CallsAnnounced, RecordsMeanwhile, StreamRunner
from ..runners.one_shot import call_in_child
from ..state.change_sets import ChangeSets
from ..state.state_store import StateStore
from .positions import StreamPositions
from .preview import preview
from .stream_table import StreamTable

log = logging.getLogger("mgstreams.registry")

_CALL_TOKENS = itertools.count(1)   # names an announced call to its stream (engine.CallsAnnounced)


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


class OffsetCalls:
    """The registry's offset calls (set, revert, cancel, pending, history, describe, check, lost records): each
    plans with no lock held (it asks the cluster), then records and hands off under the stream's lock
    (stream_table); change_sets owns the rows and the waits. `in_child`: previews run in a child process."""

    def __init__(self, table: StreamTable, store: StateStore, changes: ChangeSets, positions: StreamPositions, *,
                 in_child: bool):
        self._table, self._store, self._changes, self._positions = table, store, changes, positions
        self._in_child = in_child

    def set_offset(self, name: str, offset: object, *, timeout: float = DEFAULT_TIMEOUT_MS / 1000,
                   dry_run: bool = False, arrived: float | None = None) -> list[OffsetChange]:
        return self._settled(self.request_offset(name, offset, timeout=timeout, dry_run=dry_run, arrived=arrived))

    def request_offset(self, name: str, offset: object, *, timeout: float = DEFAULT_TIMEOUT_MS / 1000,
                       dry_run: bool = False, arrived: float | None = None) -> OffsetCall:
        deadline = _deadline(timeout, arrived)
        return self._move(name, parse_offset_spec(offset), f"offset {offset!r}", deadline, dry_run)

    def revert(self, name: str, change_id: int, *, timeout: float = DEFAULT_TIMEOUT_MS / 1000, dry_run: bool = False,
               partitions: list | None = None, arrived: float | None = None) -> list[OffsetChange]:
        return self._settled(self.request_revert(name, change_id, timeout=timeout, dry_run=dry_run,
                                                 partitions=partitions, arrived=arrived))

    def request_revert(self, name: str, change_id: int, *, timeout: float = DEFAULT_TIMEOUT_MS / 1000,
                       dry_run: bool = False, partitions: list | None = None,
                       arrived: float | None = None) -> OffsetCall:
        deadline = _deadline(timeout, arrived)
        self._table.entry(name)
        spec, note = self._changes.revert_spec(name, change_id, partitions)
        call = self._move(name, spec, note, deadline, dry_run, note=note, replaces=change_id)

        def answer() -> list[OffsetChange]:
            return [c if c.message.startswith(note) else replace(c, message="; ".join(m for m in (note, c.message)
                                                                                      if m))
                    for c in call.answer()]
        return replace(call, answer=answer)

    def _settled(self, call: OffsetCall) -> list[OffsetChange]:
        if call.change_id is not None:
            self._changes.wait(call.name, call.change_id, call.deadline, call.live)
        return call.answer()

    def _move(self, name: str, spec: OffsetSpec, shown: str, deadline: float, dry_run: bool,
              note: str | None = None, replaces: int | None = None) -> OffsetCall:
        """Plan `spec`, record it as one pending change and hand it to a running stream's gate; the call to
        wait on (not holding the stream's lock) until `deadline` (counted from the call's arrival).
        `note` becomes the history message of the changes once applied; `replaces`: the change a revert reverts
        (its rows still pending end superseded).

        The running stream is told a call is coming before it is resolved, and that it ended once its request
        was handed over (or it failed): a starting stream's first assignment may come meanwhile (KIP-848's at
        once), and the partitions it brings wait for the call rather than deliver from the group's offset
        (stream/calls_coming.py)."""
        view = self._table.view(name)
        runner = view[1]
        announced = runner if not dry_run and isinstance(runner, CallsAnnounced) else None
        token = next(_CALL_TOKENS)
        if announced is not None:
            announced.call_coming(token, deadline - time.monotonic())
        try:
            return self._resolve_and_open(name, view, spec, shown, deadline, dry_run, note, replaces)
        finally:
            if announced is not None:
                _end_call(announced, token)

    def _resolve_and_open(self, name: str, view: tuple, spec: OffsetSpec, shown: str, deadline: float,
                          dry_run: bool, note: str | None, replaces: int | None) -> OffsetCall:
        _, runner, config, query = view
        # Resolving asks the cluster (metadata, watermarks, time lookups, another group's commits): no lock is
        # held meanwhile, so stop, drop and describe answer at once; the change is opened under the lock after.
        resolved, _ = self._positions.resolve(config, query, runner, spec, shown, deadline)
        plan = [r for r in resolved if not r.unchanged]
        if dry_run:
            planned = [OffsetChange(topic=r.topic, partition=r.partition, previous_offset=r.previous_offset,
                                    offset=r.offset,
                                    status=ChangeStatus.UNCHANGED if r.unchanged else
                                    ChangeStatus.CLAMPED if r.clamped else ChangeStatus.PLANNED,
                                    message="; ".join(m for m in (note, r.message) if m) if not r.unchanged
                                    else r.message)
                       for r in resolved]
            return OffsetCall(name, None, deadline, lambda: False, lambda: planned)
        if not plan:
            running = runner is not None
            return OffsetCall(name, None, deadline, lambda: False,
                              lambda: self._changes.outcome(name, 0, resolved, running))
        with self._table.locked(name) as stream:
            if stream.config is not config:
                raise StreamStateError(f"name: stream {name!r} was altered while {shown} was resolved; nothing "
                                       f"changed, call again")
            # Started or stopped meanwhile: the targets stand; the change goes to whichever runner holds the
            # stream now (or waits for its first assignment, as on a stopped stream). A stream restarting (an
            # alter) hands it to its next runner, which starts from the pending changes.
            restarting = stream.restarting is not None
            runner = None if restarting else stream.running
            change_id = self._open(name, plan, note, runner, restarting, replaces)

        def live() -> bool:
            return self._table.live(stream)
        return OffsetCall(name, change_id if runner is not None or restarting else None, deadline, live,
                          lambda: self._changes.outcome(name, change_id, resolved, self._table.live(stream)))

    def _open(self, name: str, plan: list[ResolvedOffset], note: str | None, runner: StreamRunner | None,
              restarting: bool, replaces: int | None) -> int:
        """Record the plan as one pending change and hand it to the running stream's gate. A runner that takes a
        change before its record is durable (`records_meanwhile`) gets it inside the transaction, before the
        commit's fsync, and is told once the commit is done (or failed): its seek and fetch overlap the fsync,
        and nothing is persisted (committed, delivered from the target) before the record is durable."""
        offsets = {PartitionKey(r.topic, r.partition): r.offset for r in plan
                   if r.offset is not None}   # none failed: they raised
        onward = frozenset(PartitionKey(r.topic, r.partition) for r in plan if r.onward)
        running = runner is not None or restarting
        if not isinstance(runner, RecordsMeanwhile):
            change_id = self._changes.open(name, plan, note, running=running, replaces=replaces)
            if runner is not None:
                runner.request_offsets(change_id, offsets, onward, supersedes=replaces)
            return change_id
        handed: list[int] = []

        def hand_off(change_id: int) -> None:
            handed.append(change_id)
            runner.request_offsets(change_id, offsets, onward, supersedes=replaces, recorded=False)
        try:
            change_id = self._changes.open(name, plan, note, running=running, replaces=replaces,
                                           before_commit=hand_off)
        except BaseException:
            if handed:   # not recorded: the gate drops it, never persisted
                runner.recorded(handed[0], False)
            raise
        runner.recorded(change_id, True)
        return change_id

    def check(self, name: str, offset: object = "committed", *, limit: int = 10,
              timeout: float = CHECK_TIMEOUT_MS / 1000) -> list[PreviewStatement]:
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_CHECK_LIMIT:
            raise ConfigError(f"limit: must be an integer from 1 to {MAX_CHECK_LIMIT} (records per partition), "
                              f"got {limit!r}")
        check_timeout(timeout)
        spec = parse_offset_spec(offset)
        deadline = time.monotonic() + timeout
        stream, runner, config, query = self._table.view(name)
        if offset == "committed":   # where the stream resumes (no lock held)
            starts, ends = self._positions.resume_starts(config, query, runner)
        else:
            resolved, snapshots = self._positions.resolve(config, query, runner, spec, f"offset {offset!r}",
                                                          deadline)  # no lock held
            starts = {PartitionKey(r.topic, r.partition): r.offset for r in resolved if r.offset is not None}
            ends = {tp: snapshots[tp].log_end for tp in starts}
        left = max(deadline - time.monotonic(), 0.1)
        args = (stream.config, starts, ends, limit, left)
        if self._in_child:
            return call_in_child(preview, *args, timeout=left, secrets=stream.config.secret_values(),
                                 what=f"check: the preview of transformation {stream.config.transform!r}")
        return preview(*args)

    def pending(self, name: str) -> list[PendingOffset]:
        self._table.entry(name)
        self._changes.flush(name)
        return self._store.pending_rows(name)

    def cancel_pending(self, name: str, *, timeout: float = DEFAULT_TIMEOUT_MS / 1000) -> list[PendingOffset]:
        check_timeout(timeout)
        with self._table.locked(name) as stream:
            runner = stream.running
            up_to = self._changes.last_change(name)   # a call after this one is not cancelled
            rows = self._changes.cancel(name, up_to, running=runner is not None)   # durable before anything else
        # Its poll thread cancels them between batches (whenever it hears of it); what it persisted before that
        # has been recorded by the time it answers (reported first, on the same ordered path).
        confirmed = runner.cancel_pending(timeout, up_to) if runner is not None else []
        return self._changes.cancelled(name, rows, confirmed, up_to) if runner is not None else rows

    def describe(self, name: str) -> list[PartitionOffsets]:
        _, runner, config, query = self._table.view(name)
        # The cluster and the sink are asked with no lock held: stop and drop never wait for them.
        return self._positions.describe(config, query, runner)

    def history(self, name: str, limit: int | None = None) -> list[HistoryEntry]:
        self._table.entry(name)
        return self._changes.history(name, limit)

    def records_lost(self, name: str) -> dict[PartitionKey, int]:
        self._table.entry(name)
        return self._changes.records_lost(name)

    def acknowledge_loss(self, name: str) -> None:
        self._table.entry(name)
        acknowledged = self._changes.acknowledge_loss(name)
        if acknowledged:
            log.info("stream %s: %d lost record(s) acknowledged", name, acknowledged)


def _end_call(runner: CallsAnnounced, token: int) -> None:
    """The announced call ended (its request, if any, already handed over on the same path)."""
    try:
        runner.call_ended(token)
    except Exception as exc:   # the stream's announcement lapses by itself (calls_coming.py)
        log.warning("telling the stream that offset call %d ended failed: %s", token, exc)


def _deadline(timeout: object, arrived: float | None) -> float:
    """When a call that came at `arrived` (time.monotonic(); now when None) stops waiting."""
    check_timeout(timeout)
    return (time.monotonic() if arrived is None else arrived) + float(timeout)   # type: ignore[arg-type]


def check_timeout(timeout: object) -> bool:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ConfigError(f"timeout: must be a positive number of seconds, got {timeout!r}")
    return True
