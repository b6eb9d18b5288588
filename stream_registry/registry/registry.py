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
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from ..config import ErrorsTolerance, GroupPolicy, RestartPolicy, StreamConfig
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
    PendingOffset,
    PreviewStatement,
    RetryPolicy,
    StreamInfo,
    StreamStatus,
)
from ..offset_spec import OffsetSpec, parse_offset_spec
from ..redaction import mask_all, redact
from .admission import admit, described, shown_change
from .batch_stats import BatchStats
from .change_sets import ChangeSets
from .one_shot import call_in_child
from .positions import StreamPositions
from .preview import preview
from .runner import Isolation, StreamRunner, ThreadRunner
from .starting import starting_detail
from .state_lock import StateLock
from .state_store import StateStore
from .state_store import stored_config as stored_config  # re-exported: its public home before
from .stream_process import ProcessRunner
from .worker import StreamEvents

log = logging.getLogger("mgstreams.registry")


@dataclass(frozen=True)
class RestartBackoff:
    """When a stream whose process died is started again: capped exponential backoff.

    A process that ran `reset_after_s` before dying starts the backoff over, so
    a crash a day is restarted at once and a crash loop is slowed down.
    """
    first_s: float = 1.0
    max_s: float = 60.0
    reset_after_s: float = 60.0

    def delay(self, failures: int) -> float:
        return min(self.first_s * (2 ** (failures - 1)), self.max_s)


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
    outage_since: datetime | None = None   # its consumer finds no broker answering, since (while it runs)


class StreamRegistry:
    def __init__(self, state_dir: str | os.PathLike, *, retry: RetryPolicy = DEFAULT_RETRY,
                 query_timeout: float = 10.0, stop_timeout: float = STOP_TIMEOUT_S, holder: str | None = None,
                 isolation: Isolation = Isolation.THREAD, restart_backoff: RestartBackoff = RestartBackoff(),
                 group_policy: GroupPolicy = DEFAULT_GROUP_POLICY):
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
        self._lock = threading.Lock()
        self._streams: dict[str, _Stream] = {}
        self._closed = False
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
            self._store.insert_stream(config)
            self._streams[config.name] = _Stream(config, StreamStatus.CREATED)
        log.info("stream %s: created (%s)", config.name, described(config))
        return self.get(config.name)

    def alter(self, name: str, changes: Mapping[str, Any]) -> StreamInfo:
        """Change a stream's batch size, batch interval, transformation, sink or configs (`configs` merged, a
        null value removing a key), validated as a create is, before anything is built; nothing changes on a
        refusal. The state store keeps the new config; pending offset changes and the history stay. A running
        (or starting) stream restarts to apply it, from its committed offsets and pending changes."""
        before = self._stream(name).config
        config = before.altered(changes)
        self._group_policy.check(config)
        # no lock held: it may wait for the cluster
        admit(config, before, self._isolation, self._output_policy, self._open_query)
        with self._locked(name) as stream:
            if stream.config is not before:
                raise StreamStateError(f"name: stream {name!r} was altered meanwhile; read it and alter it again")
            running = self._running(stream) is not None
            if running:
                self._stop_locked(stream, keep_desired=True)
            self._store.update_config(config)
            stream.config = config
            if stream.query is not None:   # it connected with the old configs
                stream.query.close()
                stream.query = None
            shown = ", ".join(f"{key} {shown_change(config, key, getattr(before, key), getattr(config, key))}"
                              for key in changes)
            log.info("stream %s: altered (%s)%s", name, shown, "; restarting to apply it" if running else "")
            if running:
                stream.failures = stream.restarts = 0
                self._start_locked(stream, why="restart (altered)")
        return self.get(name)

    def start(self, name: str) -> StreamInfo:
        with self._locked(name) as stream:
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
        self._changes.notify()   # set_offset calls waiting for it answer now
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
        self._changes.notify()
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

    def close(self) -> None:
        """Stop every consumer of this process; streams keep their desired state for the next start."""
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
                   dry_run: bool = False) -> builtins.list[OffsetChange]:
        """Set the offset of every partition the spec targets; see the module docstring of offset_spec.
        One call is one change: its partitions share one change id in the history."""
        deadline = time.monotonic() + timeout if _check_timeout(timeout) else 0.0
        return self._move(name, parse_offset_spec(offset), f"offset {offset!r}", deadline, dry_run)

    def revert(self, name: str, change_id: int, *, timeout: float = DEFAULT_TIMEOUT_MS / 1000, dry_run: bool = False,
               partitions: builtins.list | None = None) -> builtins.list[OffsetChange]:
        """Move every partition of change `change_id` (one set_offset call; or only `partitions`) back to its
        previous offset, through set_offset's gated path; the history then holds the revert, its message naming
        the change it reverts. A previous offset the log no longer holds is clamped into [log start, log end],
        and the result says so."""
        deadline = time.monotonic() + timeout if _check_timeout(timeout) else 0.0
        self._stream(name)
        spec, note = self._changes.revert_spec(name, change_id, partitions)
        changes = self._move(name, spec, note, deadline, dry_run, note=note)
        return [c if c.message.startswith(note) else replace(c, message="; ".join(m for m in (note, c.message) if m))
                for c in changes]

    def _move(self, name: str, spec: OffsetSpec, shown: str, deadline: float, dry_run: bool,
              note: str | None = None) -> builtins.list[OffsetChange]:
        """Plan `spec`, record it as one pending change, hand it to a running stream's gate, and wait (not
        holding the stream's lock) until `deadline` (counted from the call's arrival) for what became of it.
        `note` becomes the history message of the changes once applied."""
        _, runner, config, query = self._view(name)
        # Resolving asks the cluster (metadata, watermarks, time lookups, another group's commits): no lock is
        # held meanwhile, so stop, drop and describe answer at once; the change is opened under the lock after.
        resolved, _ = self._positions.resolve(config, query, runner, spec, shown, deadline)
        plan = [r for r in resolved if not r.unchanged]
        if dry_run:
            return [OffsetChange(topic=r.topic, partition=r.partition, previous_offset=r.previous_offset,
                                 offset=r.offset,
                                 status=ChangeStatus.UNCHANGED if r.unchanged else
                                 ChangeStatus.CLAMPED if r.clamped else ChangeStatus.PLANNED,
                                 message="; ".join(m for m in (note, r.message) if m) if not r.unchanged
                                 else r.message)
                    for r in resolved]
        if not plan:
            return self._changes.outcome(name, 0, resolved, runner is not None)
        with self._locked(name) as stream:
            if stream.config is not config:
                raise StreamStateError(f"name: stream {name!r} was altered while {shown} was resolved; nothing "
                                       f"changed, call again")
            # Started or stopped meanwhile: the targets stand; the change goes to whichever runner holds the
            # stream now (or waits for its first assignment, as on a stopped stream).
            runner = self._running(stream)
            change_id = self._changes.open(name, plan, note, running=runner is not None)
            if runner is not None:
                runner.request_offsets(change_id, {PartitionKey(r.topic, r.partition): r.offset for r in plan
                                                   if r.offset is not None},   # none failed: they raised
                                       frozenset(PartitionKey(r.topic, r.partition) for r in plan if r.onward))
        if runner is not None:
            self._changes.wait(name, change_id, deadline, lambda: self._running(stream) is runner)
        return self._changes.outcome(name, change_id, resolved, self._running(stream) is not None)

    def check(self, name: str, offset: object = "committed", *, limit: int = 10,
              timeout: float = CHECK_TIMEOUT_MS / 1000) -> builtins.list[PreviewStatement]:
        """The statements the stream's transformation makes of up to `limit` records per partition, from
        where `offset` (any set_offset spec) resolves: Memgraph's CHECK STREAM at any offset. Read without
        joining the stream's group and without committing; nothing is written anywhere (no sink is opened).
        A partition the spec leaves alone is not read; one a group never committed is read from its offset."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_CHECK_LIMIT:
            raise ConfigError(f"limit: must be an integer from 1 to {MAX_CHECK_LIMIT} (records per partition), "
                              f"got {limit!r}")
        _check_timeout(timeout)
        spec = parse_offset_spec(offset)
        deadline = time.monotonic() + timeout
        stream, runner, config, query = self._view(name)
        resolved, snapshots = self._positions.resolve(config, query, runner, spec, f"offset {offset!r}",
                                                      deadline)  # no lock held
        starts = {PartitionKey(r.topic, r.partition): r.offset for r in resolved if r.offset is not None}
        left = max(deadline - time.monotonic(), 0.1)
        args = (stream.config, starts, {tp: snapshots[tp].log_end for tp in starts}, limit, left)
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
        """Cancel the stream's pending offsets: in its running stream's gate first (a cancelled change is never
        applied later), then in the state store; the rows cancelled. One applied meanwhile (its assignment came
        first) is in the history, not in the result."""
        _check_timeout(timeout)
        with self._locked(name) as stream:
            runner = self._running(stream)
            up_to = self._changes.last_change(name)   # a call after this one is not cancelled
        # Its poll thread cancels them between batches; what it persisted before that has been recorded by
        # the time it answers (reported first, on the same ordered path).
        cancelled = runner.cancel_pending(timeout, up_to) if runner is not None else []
        with self._locked(name) as stream:
            return self._changes.cancel(name, cancelled, runner is not None and self._running(stream) is runner,
                                        up_to)

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

    def _running(self, stream: _Stream) -> StreamRunner | None:
        return stream.runner if stream.runner is not None and stream.runner.alive else None

    def _start_locked(self, stream: _Stream, why: str) -> None:
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
        runner = self._new_runner(stream)
        stream.runner, stream.started_at, stream.exit_cause = runner, time.monotonic(), None
        try:
            self._store.set_status(config.name, StreamStatus.STARTING, None, desired_running=True)
            runner.start()
        except StreamError as exc:
            reason = redact(str(exc), config.secret_values())
            self._release(stream)
            stream.status, stream.error = StreamStatus.ERROR, reason
            self._store.set_status(config.name, StreamStatus.ERROR, reason, desired_running=True)
            log.warning("stream %s: error: %s failed: %s", config.name, why, reason)
            raise StreamError(f"stream {config.name!r} failed to start: {reason}") from None
        log.info("stream %s: %s: starting%s", config.name, why, f" (pid {runner.pid})" if runner.pid else "")

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
                              on_stats=on_stats, on_lost=lambda lost: self._changes.on_lost(name, lost),
                              on_outage=lambda since: setattr(stream, "outage_since", since))
        pending, output = self._changes.pending_moves(config.name), self._output_policy()
        if self._isolation == Isolation.PROCESS:
            return ProcessRunner(config, pending=pending, output=output, retry=self._retry, events=events,
                                 stop_timeout=self._stop_timeout,
                                 on_exit=lambda runner, cause: self._on_exit(stream, runner, cause))
        return ThreadRunner(config, pending=pending, output=output, retry=self._retry, events=events)

    def _stop_locked(self, stream: _Stream, keep_desired: bool = False) -> None:
        """Stop the runner. A thread that does not stop in time keeps its sink and its place (closing
        the sink under a write, or starting a second consumer beside it, would be worse than saying
        the stop failed); a process that does not stop in time is killed, and the stream says so."""
        runner = stream.runner
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
        if stream.config.restart == RestartPolicy.NEVER:
            error = f"stream process {cause}; not restarted (restart: never)"
        else:
            if time.monotonic() - stream.started_at >= self._restart_backoff.reset_after_s:
                stream.failures = 0
            stream.failures += 1
            delay = self._restart_backoff.delay(stream.failures)
            error = f"stream process {cause}; restarting in {delay:g} s (restart {stream.restarts + 1})"
            timer = threading.Timer(delay, self._restart, (stream, runner))
            timer.daemon = True
            timer.start()
        stream.status, stream.error = StreamStatus.ERROR, error
        log.warning("stream %s: error: %s", name,
                    error.replace("stream process", f"stream process (pid {runner.pid})", 1))
        self._changes.notify()
        try:
            self._store.set_status(name, StreamStatus.ERROR, error)
        except StreamError as exc:
            log.warning("stream %s: cannot persist status: %s", name, exc)

    def _restart(self, stream: _Stream, crashed: StreamRunner) -> None:
        """The restart policy's start: from the committed offsets (and pending changes), as a start is."""
        with stream.lock:
            if self._closed or stream.dropped or stream.runner is not crashed:
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
        self._changes.notify()
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
        return PartitionQuery(config.bootstrap_servers, config.group_id,
                              {**config.configs, **config.kafka_credentials()}, timeout=self._query_timeout,
                              secrets=config.secret_values())

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
        counts = self._store.status_counts(c.name) if c.errors_tolerance == ErrorsTolerance.ALL else {}
        return StreamInfo(name=c.name, topics=tuple(c.topics), consumer_group=c.group_id,
                          bootstrap_servers=c.bootstrap_servers, transform=c.transform, sink=c.sink,
                          status=stream.status,
                          error="; ".join(e for e in (stream.error, self._changes.store_error(c.name)) if e) or None,
                          configs=c.shown_configs(), credentials=mask_all(c.credentials),
                          batch_size=c.batch_size, batch_interval_ms=c.batch_interval_ms, restart=c.restart.value,
                          pid=runner.pid if runner else None, rss_bytes=runner.rss_bytes() if runner else None,
                          restarts=stream.restarts, delivery=c.delivery.value,
                          errors_tolerance=c.errors_tolerance.value, dead_letter_topic=c.dead_letter_topic,
                          dead_lettered=counts.get(ChangeStatus.DEAD_LETTERED, 0),
                          skipped=counts.get(ChangeStatus.SKIPPED, 0),
                          records=stream.stats.records, batches=stream.stats.batches,
                          batch_seconds_sum=stream.stats.seconds_sum,
                          batch_seconds_buckets=stream.stats.cumulative_buckets(),
                          detail=starting_detail(c.configs, time.monotonic() - stream.started_at)
                          if stream.status == StreamStatus.STARTING and runner else None,
                          cluster_unreachable_since=stream.outage_since if runner else None,
                          **self._changes.lost_counts(c.name))


def _check_timeout(timeout: object) -> bool:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ConfigError(f"timeout: must be a positive number of seconds, got {timeout!r}")
    return True
