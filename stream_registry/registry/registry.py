"""The stream registry: stream names to consumers, persisted, with offset control.

Calls on one stream are serialized by a per-stream lock, taken in the same
step as the lookup (a dropped stream is never started again); nothing waits
while holding it: an offset change waits for its stream's gate outside it
(change_sets). The poll thread of each running stream is the only one touching
its consumer (see worker). With
`isolation=Isolation.PROCESS` (the stream host) each running stream lives in a
child process of its own (stream_process): a process that dies makes its
stream `error`, naming the cause, and the stream's restart policy brings it
back from its committed offsets. A registry owns its state directory
(StateLock): constructing it restarts the streams that were running, and a
second registry on the same directory, in any process, is refused. Other
processes reach the streams through the host that owns the registry
(`mgstreams serve`), never by opening it again.

Why one module over 400 lines: each public call and each runner callback is a
step under the same registry lock and per-stream lock; what needs no lock lives
apart (admission: create's and alter's checks; positions: offsets and resolving;
change_sets; state_store; the runners).
"""
from __future__ import annotations

import builtins
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

from ..config import OPTION_FIELDS, ErrorsTolerance, GroupPolicy, StreamConfig, alter_fields
from ..errors import (
    ConfigError,
    StreamError,
    StreamExists,
    StreamNotFound,
    StreamStateError,
)
from ..graph.sinks.policy import OutputPolicy
from ..kafka.queries import PartitionQuery
from ..model import (
    CHECK_TIMEOUT_MS,
    DEFAULT_RETRY,
    DEFAULT_TIMEOUT_MS,
    MAX_CHECK_LIMIT,
    STOP_TIMEOUT_S,
    ChangeStatus,
    HistoryEntry,
    OffsetChange,
    PartitionKey,
    PartitionOffsets,
    PendingMove,
    PendingOffset,
    PreviewStatement,
    RetryPolicy,
    StreamCaps,
    StreamInfo,
    StreamStatus,
)
from ..offset_spec import OffsetSpec, parse_offset_spec
from ..redaction import mask_all, redact
from .admission import admit, described, shown_change
from .batch_stats import BatchStats
from .caps import caps_from_env, check_running, check_streams, running_processes
from .change_sets import ChangeSets
from .offset_calls import OffsetCall
from .one_shot import call_in_child
from .positions import StreamPositions
from .preview import preview
from .restarts import DEFAULT_RESTART_BACKOFF, RestartBackoff
from .runner import Isolation, StreamRunner, ThreadRunner
from .sink_change import carried_over, prepare, sink_change, split_from
from .starting import restarting_detail, starting_detail
from .state_lock import StateLock
from .state_store import StateStore
from .state_store import stored_config as stored_config  # re-exported: its public home before
from .stream_process import ProcessRunner
from .task_runner import TaskRunner, runner_pids, task_restarts
from .worker import StreamEvents

log = logging.getLogger("mgstreams.registry")


DEFAULT_GROUP_POLICY = GroupPolicy()


@dataclass
class _Stream:
    config: StreamConfig
    status: StreamStatus
    error: str | None = None
    runner: StreamRunner | None = None
    started_at: float = 0.0     # monotonic, when its runner last started
    failures: int = 0           # process deaths in a row, for the backoff
    restarts: int = 0           # restarts after a process death, since the last start by a user
    exit_cause: str | None = None   # how its process last died, until it starts again
    query: PartitionQuery | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    dropped: bool = False       # set under its lock by drop(): no call acts on it any more
    stats: BatchStats = BatchStats()   # every run's batches since this registry opened (a new run adds to it)
    restarting: StreamRunner | None = None   # the runner an alter is stopping, to start the stream again after it
    outage_since: datetime | None = None   # its consumer finds no broker answering, since (while it runs)


class StreamRegistry:
    def __init__(self, state_dir: str | os.PathLike, *, retry: RetryPolicy = DEFAULT_RETRY,
                 query_timeout: float = 10.0, stop_timeout: float = STOP_TIMEOUT_S, holder: str | None = None,
                 isolation: Isolation = Isolation.THREAD, restart_backoff: RestartBackoff = DEFAULT_RESTART_BACKOFF,
                 group_policy: GroupPolicy = DEFAULT_GROUP_POLICY, caps: StreamCaps | None = None):
        caps = caps if caps is not None else caps_from_env()   # a bad cap variable (model.StreamCaps) stops us before the lock
        self._dir_lock = StateLock(state_dir, holder or f"pid {os.getpid()} on {socket.gethostname()}")
        try:
            self._store = StateStore(state_dir)
        except BaseException:
            self._dir_lock.release()
            raise
        self.state_dir = Path(state_dir)
        self._changes = ChangeSets(self._store)
        self._positions = StreamPositions(self._store.pending, self._output_policy)
        self._stop_timeout = stop_timeout
        self._retry = retry
        self._query_timeout = query_timeout
        self._isolation = Isolation(isolation)
        self._restart_backoff = restart_backoff
        self._group_policy = group_policy
        self._caps = caps
        self._slots = threading.Lock()   # counting running processes and taking a slot are one step
        self._lock = threading.Lock()
        self._streams: dict[str, _Stream] = {}
        self._closed = False
        self._closing = False   # set once the host stops: no stream is restarted any more
        restart = []
        for config, desired_running, status, error in self._store.load_streams():
            if status in (StreamStatus.STARTING, StreamStatus.RUNNING):
                status = StreamStatus.STOPPED  # its consumer died with the old process
            self._streams[config.name] = _Stream(config, status, error)
            if desired_running:
                restart.append(config.name)
        for name in restart:
            try:
                self.start(name)
            except StreamError:
                pass   # _start_locked logged why, and the stream is `error` saying so

    # -- lifecycle ----------------------------------------------------------
    def create(self, config: StreamConfig) -> StreamInfo:
        """Validate everything (including the cluster and topics), then store; nothing on failure."""
        if not isinstance(config, StreamConfig):
            raise ConfigError(f"config: expected a StreamConfig, got {type(config).__name__}")
        config.validate()
        config = config.with_group()
        self._group_policy.check(config)
        with self._lock:
            if config.name in self._streams:
                raise StreamExists(f"name: a stream named {config.name!r} already exists")
        admit(config, None, self._isolation, self._output_policy, self._open_query)
        with self._lock:
            if config.name in self._streams:
                raise StreamExists(f"name: a stream named {config.name!r} already exists")
            check_streams(len(self._streams), self._caps)
            self._store.insert_stream(config)
            self._streams[config.name] = _Stream(config, StreamStatus.CREATED)
        log.info("stream %s: created (%s)", config.name, described(config))
        return self.get(config.name)

    def alter(self, name: str, changes: Mapping[str, Any]) -> StreamInfo:
        """Change a stream's batch size, batch interval, transformation, sink or configs (`configs` merged, a
        null value removing a key), validated as a create is, before anything is built; nothing changes on a
        refusal. The state store keeps the new config; pending offset changes and the history stay. A running
        (or starting) stream restarts to apply it, from its committed offsets and pending changes, before this
        returns; its lock is not held while the old run finishes its batch (the stream says it restarts). A sink
        change is an offset change too (sink_change): the new sink continues where the stream stood, or from
        `from`."""
        changes, start_from = split_from(changes)
        changes = alter_fields(changes)   # Kafka Connect's option names too, as create takes them
        before = self._stream(name).config
        config = before.altered(changes)
        moving = sink_change(before, config, start_from)
        self._group_policy.check(config)
        # no lock held: it may wait for the cluster
        admit(config, before, self._isolation, self._output_policy, self._open_query)
        plan: list | None = None
        partitions: list[PartitionKey] = []
        if moving is not None:   # where the new sink starts, or the partitions to carry over (asks the cluster)
            _, runner, _, query = self._view(name)
            plan, partitions = prepare(moving, before, query, runner, self._positions,
                                       time.monotonic() + DEFAULT_TIMEOUT_MS / 1000)
        apply_later: Callable[[], None] | None = None
        with self._locked(name) as stream:
            if stream.config is not before:
                raise StreamStateError(f"name: stream {name!r} was altered meanwhile; read it and alter it again")
            if stream.restarting is not None:
                raise StreamStateError(f"name: stream {name!r} is restarting to apply an earlier alter; alter it "
                                       f"again once it runs")
            old = self._running(stream)

            def apply() -> None:
                """Record the new config (and a sink change's offset change), under the stream's lock. Where a
                stream stood, carried over to its new sink, is read once it stopped (a StreamError: nothing
                changed)."""
                nonlocal plan
                if moving is not None and plan is None:
                    plan = carried_over(before, partitions, self._positions.stored_offsets,
                                        self._store.pending(name))
                self._store.update_config(config)
                if moving is not None and plan:
                    self._changes.open(name, plan, moving.note, running=False, sink_change=True)
                stream.config = config
                if stream.query is not None:   # it connected with the old configs
                    stream.query.close()
                    stream.query = None
                fields = [OPTION_FIELDS.get(key, key) for key in changes]   # `value.format` is value_format
                shown = ", ".join(f"{key} {shown_change(config, key, getattr(before, key), getattr(config, key))}"
                                  for key in fields)
                log.info("stream %s: altered (%s)%s", name, shown, "; restarting to apply it" if old else "")

            if old is None or moving is None or plan is not None:
                apply()
            else:
                apply_later = apply   # a sink change carried over: once the old run stopped
            if old is not None:
                # Recorded and handed off under the lock; the stop (a batch finishing) and the start happen
                # outside it, so describe, set_offset and stop answer meanwhile (the stream says it restarts).
                stream.failures = stream.restarts = 0
                stream.restarting = old
        if old is not None:
            self._restart_altered(stream, old, apply_later)
        return self.get(name)

    def _restart_altered(self, stream: _Stream, old: StreamRunner, apply: Callable[[], None] | None) -> None:
        """An alter's restart: stop the old runner (no lock held), then start the new config (`apply`, where given,
        records it once the old run stopped; refused, the old config starts again and the refusal is raised),
        unless the stream was stopped or dropped meanwhile or the host is stopping."""
        name, why = stream.config.name, "restart (altered)"
        failed: StreamError | None = None
        refused: StreamError | None = None
        try:
            note = old.stop(self._stop_timeout)
        except StreamError as exc:
            failed, note = exc, None
        with stream.lock:
            if stream.restarting is not old or stream.dropped or self._closing or self._closed:
                return   # stopped or dropped meanwhile (their stop ended the restart), or the host stops
            if failed is not None:   # a thread that did not stop in time keeps its sink and its place
                stream.restarting = None
                stream.error = f"{failed}; it is still finishing its batch, stop it again later"
                log.warning("stream %s: restart (altered) failed: %s", name, stream.error)
                raise StreamStateError(f"name: {stream.error}") from None
            stream.runner = None
            stream.status, stream.error = StreamStatus.STOPPED, note
            if apply is not None:
                try:
                    apply()
                except StreamError as exc:
                    refused, why = exc, "restart (alter refused)"
            handed = self._changes.last_change(name)   # the new runner is handed the changes up to this one
            try:
                runner = self._prepared_runner(stream, why)
            except StreamError:
                stream.restarting = None
                raise
        # The new process starts (spawn, imports, subscribe) with no lock held either: the stream still says it
        # restarts, and offset changes made meanwhile are recorded for it, and handed to it once it runs.
        failed = None
        try:
            runner.start()
        except StreamError as exc:
            failed = exc
        try:
            with stream.lock:
                if stream.restarting is not old or stream.runner is not runner:
                    return   # stopped or dropped meanwhile: their stop took this runner too
                stream.restarting = None
                if failed is not None:
                    self._start_failed(stream, why, failed)
                log.info("stream %s: %s: starting%s", name, why, f" (pid {runner.pid})" if runner.pid else "")
                self._hand_newer(name, runner, handed)
        finally:
            self._changes.notify(name)   # calls waiting through the restart
        if refused is not None:
            raise refused

    def _hand_newer(self, name: str, runner: StreamRunner, handed: int) -> None:
        """Hand a runner that started from the pending changes up to `handed` those recorded since."""
        newer: dict[int, dict[PartitionKey, PendingMove]] = {}
        for tp, move in self._changes.pending_moves(name).items():
            if move.change_id > handed:
                newer.setdefault(move.change_id, {})[tp] = move
        for change_id, moves in sorted(newer.items()):
            runner.request_offsets(change_id, {tp: m.offset for tp, m in moves.items()},
                                   frozenset(tp for tp, m in moves.items() if m.onward))

    def start(self, name: str) -> StreamInfo:
        with self._locked(name) as stream:
            if stream.restarting is not None:
                raise StreamStateError(f"name: stream {name!r} is restarting to apply an alter")
            if stream.status == StreamStatus.ERROR and self._running(stream) is not None:
                self._stop_locked(stream, keep_desired=True)  # it reported ERROR and is ending: let it end
            if stream.runner is not None and stream.runner.alive:
                state = "still stopping (its last stop timed out)" if stream.runner.stopping \
                    else f"already {stream.status.value}"
                raise StreamStateError(f"name: stream {name!r} is {state}")
            stream.failures = stream.restarts = 0
            self._start_locked(stream, why="start")
        return self.get(name)

    def stop(self, name: str) -> StreamInfo:
        """Stop consuming and keep the stream from being restarted; stopping a stopped stream is a no-op."""
        with self._locked(name) as stream:
            was = stream.status
            if stream.runner is not None:
                self._stop_locked(stream)
            self._store.set_status(name, stream.status, stream.error, desired_running=False)
        if was in (StreamStatus.STARTING, StreamStatus.RUNNING, StreamStatus.ERROR):
            log.info("stream %s: stopped (was %s)", name, was.value)
        self._changes.notify(name)   # set_offset calls waiting for it answer now
        return self.get(name)

    def drop(self, name: str) -> StreamInfo:
        """Stop and forget the stream; a second drop (even a concurrent one) is StreamNotFound."""
        with self._locked(name) as stream:
            was = stream.status
            if stream.runner is not None:
                self._stop_locked(stream)
            info = self._info(stream)
            if stream.query is not None:
                stream.query.close()
            self._store.delete_stream(name)
            stream.dropped = True
            with self._lock:
                self._streams.pop(name, None)
            self._changes.forget(name)
        log.info("stream %s: dropped (was %s)", name, was.value)
        self._changes.notify(name)
        return info

    def list(self) -> list[StreamInfo]:
        with self._lock:
            streams = list(self._streams.values())
        return [self._info(s) for s in sorted(streams, key=lambda s: s.config.name)]

    def get(self, name: str) -> StreamInfo:
        return self._info(self._stream(name))

    def config(self, name: str) -> StreamConfig:
        """The stream's configuration, secrets included: for helpers in this process that connect as the
        stream does (the lag sampler's reader), never for an answer to a client."""
        return self._stream(name).config

    def begin_close(self) -> None:
        """The host is stopping (a signal): from now on no stream is restarted (a process that ends is not
        replaced) and calls waiting for an offset change answer at once; close() follows."""
        self._closing = True
        self._changes.notify()

    def close(self) -> None:
        """Stop every consumer of this process; streams keep their desired state for the next start."""
        self._closing = True
        with self._lock:
            if self._closed:
                return
            self._closed = True
            streams = list(self._streams.values())
        failed = []

        def close_one(stream: _Stream) -> None:  # every stream gets its stop, whatever happens to the others
            with stream.lock:
                try:
                    if stream.runner is not None:
                        self._stop_locked(stream, keep_desired=True)
                except StreamError as exc:
                    failed.append(f"{stream.config.name}: {exc}")
                if stream.query is not None:
                    stream.query.close()
                    stream.query = None
        with ThreadPoolExecutor(max_workers=max(len(streams), 1), thread_name_prefix="mgstreams-close") as pool:
            list(pool.map(close_one, streams))   # all at once: a host's shutdown takes one stop timeout
        self._store.close()
        self._dir_lock.release()
        if failed:
            log.error("registry closed; streams that did not stop cleanly: %s", "; ".join(failed))

    # -- offsets --------------------------------------------------------------
    def set_offset(self, name: str, offset: object, *, timeout: float = DEFAULT_TIMEOUT_MS / 1000,
                   dry_run: bool = False, arrived: float | None = None) -> builtins.list[OffsetChange]:
        """Set the offset of every partition the spec targets; see the module docstring of offset_spec.
        One call is one change: its partitions share one change id in the history. The wait ends `timeout`
        seconds after `arrived` (time.monotonic() when the call came; now by default)."""
        return self._settled(self.request_offset(name, offset, timeout=timeout, dry_run=dry_run, arrived=arrived))

    def request_offset(self, name: str, offset: object, *, timeout: float = DEFAULT_TIMEOUT_MS / 1000,
                       dry_run: bool = False, arrived: float | None = None) -> OffsetCall:
        """set_offset up to its hand-off: the change is recorded and handed to the stream's gate; the caller
        waits for it (or not) and reads `answer()` (the host awaits it holding no thread)."""
        deadline = _deadline(timeout, arrived)
        return self._move(name, parse_offset_spec(offset), f"offset {offset!r}", deadline, dry_run)

    def revert(self, name: str, change_id: int, *, timeout: float = DEFAULT_TIMEOUT_MS / 1000, dry_run: bool = False,
               partitions: builtins.list | None = None, arrived: float | None = None) -> builtins.list[OffsetChange]:
        """Move every partition of change `change_id` (one set_offset call; or only `partitions`) back to its
        previous offset, through set_offset's gated path; the history then holds the revert, its message naming
        the change it reverts. A previous offset the log no longer holds is clamped into [log start, log end],
        and the result says so."""
        return self._settled(self.request_revert(name, change_id, timeout=timeout, dry_run=dry_run,
                                                 partitions=partitions, arrived=arrived))

    def request_revert(self, name: str, change_id: int, *, timeout: float = DEFAULT_TIMEOUT_MS / 1000,
                       dry_run: bool = False, partitions: builtins.list | None = None,
                       arrived: float | None = None) -> OffsetCall:
        """revert up to its hand-off (as request_offset)."""
        deadline = _deadline(timeout, arrived)
        self._stream(name)
        spec, note = self._changes.revert_spec(name, change_id, partitions)
        call = self._move(name, spec, note, deadline, dry_run, note=note, replaces=change_id)

        def answer() -> builtins.list[OffsetChange]:
            return [c if c.message.startswith(note) else replace(c, message="; ".join(m for m in (note, c.message)
                                                                                      if m))
                    for c in call.answer()]
        return replace(call, answer=answer)

    def watch(self, callback: Callable[[str | None], None]) -> Callable[[], None]:
        """Call `callback(stream name)` (None: any stream) from any thread whenever a pending change or a
        stream's state may have changed; the function that stops it."""
        return self._changes.watch(callback)

    def unsettled(self, name: str, change_ids: Iterable[int]) -> set[int]:
        """Those of `change_ids` that still have a pending row."""
        return self._changes.unsettled(name, change_ids)

    def _settled(self, call: OffsetCall) -> builtins.list[OffsetChange]:
        if call.change_id is not None:
            self._changes.wait(call.name, call.change_id, call.deadline, call.live)
        return call.answer()

    def _move(self, name: str, spec: OffsetSpec, shown: str, deadline: float, dry_run: bool,
              note: str | None = None, replaces: int | None = None) -> OffsetCall:
        """Plan `spec`, record it as one pending change and hand it to a running stream's gate; the call to
        wait on (not holding the stream's lock) until `deadline` (counted from the call's arrival).
        `note` becomes the history message of the changes once applied; `replaces`: the change a revert reverts
        (its rows still pending end superseded)."""
        _, runner, config, query = self._view(name)
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
        with self._locked(name) as stream:
            if stream.config is not config:
                raise StreamStateError(f"name: stream {name!r} was altered while {shown} was resolved; nothing "
                                       f"changed, call again")
            # Started or stopped meanwhile: the targets stand; the change goes to whichever runner holds the
            # stream now (or waits for its first assignment, as on a stopped stream). A stream restarting (an
            # alter) hands it to its next runner, which starts from the pending changes.
            restarting = stream.restarting is not None
            runner = None if restarting else self._running(stream)
            change_id = self._changes.open(name, plan, note, running=runner is not None or restarting,
                                           replaces=replaces)
            if runner is not None:
                runner.request_offsets(change_id, {PartitionKey(r.topic, r.partition): r.offset for r in plan
                                                   if r.offset is not None},   # none failed: they raised
                                       frozenset(PartitionKey(r.topic, r.partition) for r in plan if r.onward),
                                       supersedes=replaces)

        def live() -> bool:
            return self._live(stream)
        return OffsetCall(name, change_id if runner is not None or restarting else None, deadline, live,
                          lambda: self._changes.outcome(name, change_id, resolved, self._live(stream)))

    def check(self, name: str, offset: object = "committed", *, limit: int = 10,
              timeout: float = CHECK_TIMEOUT_MS / 1000) -> builtins.list[PreviewStatement]:
        """The statements the stream's transformation makes of up to `limit` records per partition, from
        where `offset` (any set_offset spec) resolves: Memgraph's CHECK STREAM at any offset. Read without
        joining the stream's group and without committing; nothing is written anywhere (no sink is opened).
        A partition the spec leaves alone is not read; one a group never committed is read from its offset.
        "committed" (the default) previews from where the stream resumes (`describe`'s resume_offset: a pending
        change, an exactly-once sink's stored offset, the committed offset, else auto.offset.reset), so a
        stream that has committed nothing yet previews what it would read first."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_CHECK_LIMIT:
            raise ConfigError(f"limit: must be an integer from 1 to {MAX_CHECK_LIMIT} (records per partition), "
                              f"got {limit!r}")
        _check_timeout(timeout)
        spec = parse_offset_spec(offset)
        deadline = time.monotonic() + timeout
        stream, runner, config, query = self._view(name)
        if offset == "committed":   # where the stream resumes (no lock held)
            starts, ends = self._positions.resume_starts(config, query, runner)
        else:
            resolved, snapshots = self._positions.resolve(config, query, runner, spec, f"offset {offset!r}",
                                                          deadline)  # no lock held
            starts = {PartitionKey(r.topic, r.partition): r.offset for r in resolved if r.offset is not None}
            ends = {tp: snapshots[tp].log_end for tp in starts}
        left = max(deadline - time.monotonic(), 0.1)
        args = (stream.config, starts, ends, limit, left)
        if self._isolation == Isolation.PROCESS:
            return call_in_child(preview, *args, timeout=left, secrets=stream.config.secret_values(),
                                 what=f"check: the preview of transformation {stream.config.transform!r}")
        return preview(*args)

    def pending(self, name: str) -> builtins.list[PendingOffset]:
        """Offsets waiting for an assignment (a stopped stream, or partitions another member holds)."""
        self._stream(name)
        self._changes.flush(name)
        return self._store.pending_rows(name)

    def cancel_pending(self, name: str, *, timeout: float = DEFAULT_TIMEOUT_MS / 1000) -> builtins.list[PendingOffset]:
        """Cancel the stream's pending offsets: in the state store first (from then on never pending, never handed
        to a stream process), then in its running stream's gate, whenever it hears of it (a cancelled change is
        never applied later); the rows cancelled. One applied before the gate heard (its assignment came first)
        is in the history, not in the result."""
        _check_timeout(timeout)
        with self._locked(name) as stream:
            runner = self._running(stream)
            up_to = self._changes.last_change(name)   # a call after this one is not cancelled
            rows = self._changes.cancel(name, up_to, running=runner is not None)   # durable before anything else
        # Its poll thread cancels them between batches (whenever it hears of it); what it persisted before that
        # has been recorded by the time it answers (reported first, on the same ordered path).
        confirmed = runner.cancel_pending(timeout, up_to) if runner is not None else []
        return self._changes.cancelled(name, rows, confirmed, up_to) if runner is not None else rows

    def describe(self, name: str) -> builtins.list[PartitionOffsets]:
        """Per partition: committed, position, log start/end, lag, held by this stream's consumer, the
        offset its sink stores (exactly-once) and where it would resume if started now (`resume_point`)."""
        _, runner, config, query = self._view(name)
        # The cluster and the sink are asked with no lock held: stop and drop never wait for them.
        return self._positions.describe(config, query, runner)

    def history(self, name: str, limit: int | None = None) -> builtins.list[HistoryEntry]:
        self._stream(name)
        return self._changes.history(name, limit)

    def records_lost(self, name: str) -> dict[PartitionKey, int]:
        """Records that left the log before the stream read them, per partition (its `lost` history rows)."""
        self._stream(name)
        return self._changes.records_lost(name)

    def acknowledge_loss(self, name: str) -> StreamInfo:
        """An operator has seen the stream's lost records: its verdict no longer says ERR for them (the count
        and the history rows stay)."""
        self._stream(name)
        acknowledged = self._changes.acknowledge_loss(name)
        if acknowledged:
            log.info("stream %s: %d lost record(s) acknowledged", name, acknowledged)
        return self.get(name)

    # -- internals ------------------------------------------------------------
    def _stream(self, name: str) -> _Stream:
        if not isinstance(name, str):
            raise ConfigError(f"name: expected a stream name, got {type(name).__name__} {name!r}")
        with self._lock:
            if self._closed:
                raise StreamStateError("registry: closed")
            stream = self._streams.get(name)
        if stream is None:
            raise StreamNotFound(f"name: no stream named {name!r}")
        return stream

    @contextmanager
    def _locked(self, name: str):
        """Look the stream up and take its lock in one step: a stream dropped meanwhile is not found."""
        stream = self._stream(name)
        with stream.lock:
            if stream.dropped:
                raise StreamNotFound(f"name: no stream named {name!r}")
            yield stream

    def _view(self, name: str) -> tuple[_Stream, StreamRunner | None, StreamConfig, PartitionQuery]:
        """What a call needs to ask the cluster with no lock held: the stream, its runner, config and query,
        read together under its lock."""
        with self._locked(name) as stream:
            return stream, self._running(stream), stream.config, self._query(stream)

    def _live(self, stream: _Stream) -> bool:
        """Whether the stream runs, or restarts to run again (an alter), in a registry that is not stopping."""
        return not (self._closing or stream.dropped) and (stream.restarting is not None
                                                         or self._running(stream) is not None)

    def _running(self, stream: _Stream) -> StreamRunner | None:
        return stream.runner if stream.runner is not None and stream.runner.alive else None

    def _start_locked(self, stream: _Stream, why: str) -> None:
        runner = self._prepared_runner(stream, why)
        try:
            runner.start()
        except StreamError as exc:
            self._start_failed(stream, why, exc)
        log.info("stream %s: %s: starting%s", stream.config.name, why, f" (pid {runner.pid})" if runner.pid else "")

    def _prepared_runner(self, stream: _Stream, why: str) -> StreamRunner:
        """A new runner for the stream, recorded as starting (its start() is the caller's)."""
        config = stream.config
        self._release(stream)  # a stream that went to ERROR by itself left its sink or process behind
        try:   # a stored stream read back: the allowlists of today (bootstrap and Bolt hosts, group) apply to it
            config.validate()
            self._group_policy.check(config)
        except ConfigError as exc:
            stream.status, stream.error = StreamStatus.ERROR, f"not started: {exc}"
            self._store.set_status(config.name, StreamStatus.ERROR, stream.error)
            log.warning("stream %s: %s refused: %s", config.name, why, exc)
            raise
        with self._slots:
            if self._isolation == Isolation.PROCESS:
                self._check_running(stream)
            runner = self._new_runner(stream)
            stream.runner, stream.started_at, stream.exit_cause = runner, time.monotonic(), None
        try:
            self._store.set_status(config.name, StreamStatus.STARTING, None, desired_running=True)
        except StreamError as exc:
            self._start_failed(stream, why, exc)
        return runner

    def _start_failed(self, stream: _Stream, why: str, exc: StreamError) -> NoReturn:
        config = stream.config
        reason = redact(str(exc), config.secret_values())
        self._release(stream)
        stream.status, stream.error = StreamStatus.ERROR, reason
        self._store.set_status(config.name, StreamStatus.ERROR, reason, desired_running=True)
        log.warning("stream %s: error: %s failed: %s", config.name, why, reason)
        raise StreamError(f"stream {config.name!r} failed to start: {reason}") from None

    def _check_running(self, stream: _Stream) -> None:
        """StreamStateError naming $MGSTREAMS_MAX_RUNNING (the stream in error, saying so) past the cap."""
        with self._lock:
            runners = [s.runner for s in self._streams.values() if s is not stream and s.runner is not None]
        tasks = getattr(stream.config, "tasks", 1)
        try:
            check_running(running_processes(runners), tasks if isinstance(tasks, int) else 1, self._caps,
                          stream.config.name)
        except StreamStateError as exc:
            stream.status, stream.error = StreamStatus.ERROR, f"not started: {exc}"
            self._store.set_status(stream.config.name, StreamStatus.ERROR, stream.error)
            log.warning("stream %s: %s", stream.config.name, stream.error)
            raise

    def _new_runner(self, stream: _Stream) -> StreamRunner:
        config = stream.config
        name = config.name
        earlier = stream.stats   # this run's batches add to those of the runs before
        stream.outage_since = None   # this run's consumer says when it finds no broker

        def on_stats(stats: BatchStats) -> None:
            stream.stats = earlier + stats
        events = StreamEvents(on_status=lambda status, error: self._on_status(stream, status, error),
                              on_change=lambda event: self._changes.on_event(name, event),
                              on_set_aside=lambda records: self._changes.on_set_aside(name, records),
                              on_realign=lambda moves: self._changes.on_realign(name, moves),
                              on_stats=on_stats, on_lost=lambda lost: self._changes.on_lost(name, lost),
                              on_outage=lambda since: setattr(stream, "outage_since", since))
        if config.tasks > 1:   # N member processes, one runner (task_runner)
            return TaskRunner(config, events=events, new_task=lambda task_events, on_exit: self._one_runner(
                config, task_events, on_exit), backoff=self._restart_backoff, lock=stream.lock,
                host_stopping=lambda: self._closing)
        return self._one_runner(config, events, lambda runner, cause: self._on_exit(stream, runner, cause))

    def _one_runner(self, config: StreamConfig, events: StreamEvents, on_exit) -> StreamRunner:
        pending, output = self._changes.pending_moves(config.name), self._output_policy()
        marks = self._store.mark_key(config.name)   # its identity and mark key (change_marks), shared by its tasks
        if self._isolation == Isolation.PROCESS:
            return ProcessRunner(config, pending=pending, output=output, retry=self._retry, events=events,
                                 stop_timeout=self._stop_timeout, memory_limit_mb=self._caps.stream_memory_mb,
                                 on_exit=on_exit, marks=marks)
        return ThreadRunner(config, pending=pending, output=output, retry=self._retry, events=events, marks=marks)

    def _stop_locked(self, stream: _Stream, keep_desired: bool = False) -> None:
        """Stop the runner. A thread that does not stop in time keeps its sink and its place (closing
        the sink under a write, or starting a second consumer beside it, would be worse than saying
        the stop failed); a process that does not stop in time is killed, and the stream says so."""
        runner = stream.runner
        stream.restarting = None   # a stop (or drop, or close) ends an alter's restart: nothing starts after it
        note = None
        if runner is not None:
            try:
                note = runner.stop(self._stop_timeout)
            except StreamError as exc:
                stream.error = f"{exc}; it is still finishing its batch, stop it again later"
                raise StreamStateError(f"name: {stream.error}") from None
        stream.runner = None
        if stream.status != StreamStatus.ERROR or note:
            stream.status, stream.error = StreamStatus.STOPPED, note
        elif stream.exit_cause:   # no restart is coming any more
            stream.error = f"stream process {stream.exit_cause}"
        if not keep_desired:
            self._store.set_status(stream.config.name, stream.status, stream.error, desired_running=False)

    def _release(self, stream: _Stream) -> None:
        if stream.runner is not None:
            stream.runner.close()
            stream.runner = None

    def _on_exit(self, stream: _Stream, runner: StreamRunner, cause: str) -> None:
        """A stream's process died (its pipe's reader thread): say so, and restart it if its policy says so."""
        if self._closed or stream.runner is not runner:
            return  # stopped, dropped or restarted meanwhile
        name = stream.config.name
        stream.exit_cause = cause
        outcome = self._restart_backoff.after_exit(cause, stream.config.restart, failures=stream.failures,
                                                   ran_s=time.monotonic() - stream.started_at,
                                                   restarts=stream.restarts, host_stopping=self._closing)
        stream.failures, error = outcome.failures, outcome.error
        if outcome.delay_s is not None:
            timer = threading.Timer(outcome.delay_s, self._restart, (stream, runner))
            timer.daemon = True
            timer.start()
        stream.status, stream.error = StreamStatus.ERROR, error
        log.warning("stream %s: error: %s", name,
                    error.replace("stream process", f"stream process (pid {runner.pid})", 1))
        self._changes.notify(name)
        try:
            self._store.set_status(name, StreamStatus.ERROR, error)
        except StreamError as exc:
            log.warning("stream %s: cannot persist status: %s", name, exc)

    def _restart(self, stream: _Stream, crashed: StreamRunner) -> None:
        """The restart policy's start: from the committed offsets (and pending changes), as a start is."""
        with stream.lock:
            if self._closing or self._closed or stream.dropped or stream.runner is not crashed \
                    or stream.restarting is not None:   # an alter's restart starts it
                return
            stream.restarts += 1
            try:
                self._start_locked(stream, why=f"restart {stream.restarts} (restart: {stream.config.restart.value})")
            except StreamError as exc:
                log.warning("stream %s: restart failed: %s", stream.config.name, exc)

    def _on_status(self, stream: _Stream, status: StreamStatus, error: str | None) -> None:
        was, was_error = stream.status, stream.error
        stream.status, stream.error = status, error
        if status == StreamStatus.RUNNING and was != StreamStatus.RUNNING:
            log.info("stream %s: running (the group assigned its partitions after %.1f s)", stream.config.name,
                     time.monotonic() - stream.started_at)
        elif status == StreamStatus.ERROR and (was != StreamStatus.ERROR or error != was_error):
            log.warning("stream %s: error: %s", stream.config.name, error)
        self._changes.notify(stream.config.name)
        if status == StreamStatus.STOPPED:
            return  # stop()/close() store the final state and the desired state together
        try:
            self._store.set_status(stream.config.name, status, error)
        except StreamError as exc:
            log.warning("stream %s: cannot persist status: %s", stream.config.name, exc)

    def _output_policy(self) -> OutputPolicy:
        """Where this registry's file sinks may write: $MGSTREAMS_OUTPUT_DIRS, else <state dir>/output."""
        return OutputPolicy.for_state_dir(self.state_dir)

    def _open_query(self, config: StreamConfig) -> PartitionQuery:
        return PartitionQuery(config.bootstrap.text, config.group_id, config.kafka_settings(),
                              timeout=self._query_timeout, secrets=config.secret_values())

    def _query(self, stream: _Stream) -> PartitionQuery:
        if stream.query is None:
            # A stored stream read back: today's allowlists (its hosts, its group) apply before anything
            # connects on its behalf, as they do at start.
            stream.config.validate()
            self._group_policy.check(stream.config)
            stream.query = self._open_query(stream.config)
        return stream.query

    def _info(self, stream: _Stream) -> StreamInfo:
        c = stream.config
        runner = self._running(stream)
        restarting = stream.restarting
        counts = self._store.status_counts(c.name) if c.errors_tolerance == ErrorsTolerance.ALL else {}
        return StreamInfo(name=c.name, topics=tuple(c.topics), consumer_group=c.group_id,
                          bootstrap_servers=c.bootstrap_servers, transform=c.transform, sink=c.sink,
                          status=StreamStatus.STARTING if restarting is not None else stream.status,
                          error="; ".join(e for e in (stream.error, self._changes.store_error(c.name)) if e) or None,
                          configs=c.shown_configs(), credentials=mask_all(c.credentials),
                          batch_size=c.batch_size, batch_interval_ms=c.batch_interval_ms, restart=c.restart.value,
                          pid=runner.pid if runner else None, rss_bytes=runner.rss_bytes() if runner else None,
                          restarts=stream.restarts + task_restarts(runner), delivery=c.delivery.value,
                          errors_tolerance=c.errors_tolerance.value, dead_letter_topic=c.dead_letter_topic,
                          key_format=c.key_format, value_format=c.value_format,
                          schema_registry_url=c.schema_registry_url, transform_options=dict(c.transform_options),
                          dead_lettered=counts.get(ChangeStatus.DEAD_LETTERED, 0),
                          skipped=counts.get(ChangeStatus.SKIPPED, 0),
                          records=stream.stats.records, batches=stream.stats.batches,
                          batch_seconds_sum=stream.stats.seconds_sum,
                          batch_seconds_buckets=stream.stats.cumulative_buckets(),
                          detail=restarting_detail(restarting.pid) if restarting is not None else
                          starting_detail(c.configs, time.monotonic() - stream.started_at)
                          if stream.status == StreamStatus.STARTING and runner else None,
                          tasks=c.tasks, pids=runner_pids(runner),
                          cluster_unreachable_since=stream.outage_since if runner else None,
                          **self._changes.lost_counts(c.name))


def _deadline(timeout: object, arrived: float | None) -> float:
    """When a call that came at `arrived` (time.monotonic(); now when None) stops waiting."""
    _check_timeout(timeout)
    return (time.monotonic() if arrived is None else arrived) + float(timeout)   # type: ignore[arg-type]


def _check_timeout(timeout: object) -> bool:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ConfigError(f"timeout: must be a positive number of seconds, got {timeout!r}")
    return True
