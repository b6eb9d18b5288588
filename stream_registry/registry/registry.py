"""The stream registry: stream names to consumers, persisted, with offset control.

Calls on one stream are serialized by a per-stream lock; the poll thread of
each running stream is the only one touching its consumer (see worker). With
`isolation=Isolation.PROCESS` (the stream host) each running stream lives in a
child process of its own (stream_process): a process that dies makes its
stream `error`, naming the cause, and the stream's restart policy brings it
back from its committed offsets. A registry owns its state directory
(StateLock): constructing it restarts the streams that were running, and a
second registry on the same directory, in any process, is refused. Other
processes reach the streams through the host that owns the registry
(`mgstreams serve`), never by opening it again.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..config import Delivery, ErrorsTolerance, RestartPolicy, StreamConfig
from ..errors import ConfigError, OffsetSpecError, StreamError, StreamNotFound, StreamStateError, TransformError
from ..kafka.queries import PartitionQuery
from ..offset_spec import Absolute, ChangeStatus, OffsetSpec, parse_offset_spec, resolve
from ..offsets import HistoryEntry, OffsetChange, PartitionOffsets, PendingOffset, PreviewStatement
from ..redaction import mask_all, redact, redact_error
from ..resume_point import resume_offsets
from ..graph.transform import is_builtin
from ..graph.sinks import OutputPolicy, read_stored_offsets, validate_sink_uri
from .runner import (Isolation, StreamRunner, ThreadRunner, check_stream_transformation,
                     locate_stream_transformation)
from .one_shot import call_in_child
from .preview import preview
from .state_lock import StateLock
from .state_store import STATE_FILE, StateStore
from .stream_process import ProcessRunner
from ..stream_info import StreamInfo, StreamStatus
from .batch_stats import BatchStats
from .dead_letter import SetAside
from .worker import AppliedOffset, RetryPolicy, StreamEvents, WorkerSnapshot

log = logging.getLogger("mgstreams.registry")
TP = tuple[str, int]
_OFFSET_CHANGES = (ChangeStatus.APPLIED, ChangeStatus.CLAMPED)   # history rows that fulfil a pending offset
CHECK_IMPORT_TIMEOUT_S = 60.0   # importing a transformation's module at create (a large ML library takes long)
MAX_CHECK_LIMIT = 1000   # records per partition a preview reads at most (they are all held in memory)


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
    clamped: set[TP] = field(default_factory=set)
    unrecorded: list = field(default_factory=list)   # applied changes the state store has not taken yet
    store_error: str | None = None                    # why they wait (shown with the status)
    history_lock: threading.Lock = field(default_factory=threading.Lock)
    stats: BatchStats = BatchStats()   # every run's batches since this registry opened (a new run adds to it)


class StreamRegistry:
    def __init__(self, state_dir: str | os.PathLike, *, retry: RetryPolicy = RetryPolicy(),
                 query_timeout: float = 10.0, stop_timeout: float = 30.0, holder: str | None = None,
                 isolation: Isolation = Isolation.THREAD, restart_backoff: RestartBackoff = RestartBackoff()):
        self._dir_lock = StateLock(state_dir, holder or f"pid {os.getpid()} on {socket.gethostname()}")
        try:
            self._store = StateStore(state_dir)
        except BaseException:
            self._dir_lock.release()
            raise
        self.state_dir = Path(state_dir)
        self._stop_timeout = stop_timeout
        self._retry = retry
        self._query_timeout = query_timeout
        self._isolation = Isolation(isolation)
        self._restart_backoff = restart_backoff
        self._lock = threading.Lock()
        self._streams: dict[str, _Stream] = {}
        self._closed = False
        restart = []
        for config, desired_running, status, error in self._store.load_streams():
            if status in (StreamStatus.STARTING, StreamStatus.RUNNING):
                status = StreamStatus.STOPPED  # its consumer died with the old process
            self._streams[config.name] = _Stream(config, status, error,
                                                 clamped=self._store.pending_clamped(config.name))
            if desired_running:
                restart.append(config.name)
        for name in restart:
            try:
                self.start(name)
            except StreamError as exc:
                log.warning("stream %s could not be restored: %s", name, exc)

    # -- lifecycle ----------------------------------------------------------
    def create(self, config: StreamConfig) -> StreamInfo:
        """Validate everything (including the cluster and topics), then store; nothing on failure."""
        if not isinstance(config, StreamConfig):
            raise ConfigError(f"config: expected a StreamConfig, got {type(config).__name__}")
        config.validate()
        config = config.with_group()
        with self._lock:
            if config.name in self._streams:
                raise ConfigError(f"name: a stream named {config.name!r} already exists")
        self._check_transformation(config)
        try:
            validate_sink_uri(config.sink, self._output_policy())
        except StreamError as exc:
            raise ConfigError(redact_error(str(exc), config.secret_values())) from None
        with self._open_query(config) as query:
            query.partitions(config.topics)
        with self._lock:
            if config.name in self._streams:
                raise ConfigError(f"name: a stream named {config.name!r} already exists")
            self._store.insert_stream(config)
            self._streams[config.name] = _Stream(config, StreamStatus.CREATED)
        return self.get(config.name)

    def start(self, name: str) -> StreamInfo:
        stream = self._stream(name)
        with stream.lock:
            if stream.status == StreamStatus.ERROR and self._running(stream) is not None:
                self._stop_locked(stream, keep_desired=True)  # it reported ERROR and is ending: let it end
            if stream.runner is not None and stream.runner.alive:
                state = "still stopping (its last stop timed out)" if stream.runner.stopping \
                    else f"already {stream.status.value}"
                raise StreamStateError(f"name: stream {name!r} is {state}")
            stream.failures = stream.restarts = 0
            self._start_locked(stream)
        return self.get(name)

    def stop(self, name: str) -> StreamInfo:
        """Stop consuming and keep the stream from being restarted; stopping a stopped stream is a no-op."""
        stream = self._stream(name)
        with stream.lock:
            if stream.runner is not None:
                self._stop_locked(stream)
            self._store.set_status(name, stream.status, stream.error, desired_running=False)
        return self.get(name)

    def drop(self, name: str) -> StreamInfo:
        stream = self._stream(name)
        with stream.lock:
            if stream.runner is not None:
                self._stop_locked(stream)
            info = self._info(stream)
            if stream.query is not None:
                stream.query.close()
            self._store.delete_stream(name)
            with self._lock:
                self._streams.pop(name, None)
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
    def set_offset(self, name: str, offset: object, *, timeout: float = 10.0,
                   dry_run: bool = False) -> list[OffsetChange]:
        """Set the offset of every partition the spec targets; see the module docstring of offset_spec."""
        _check_timeout(timeout)
        return self._move(name, parse_offset_spec(offset), f"offset {offset!r}", timeout, dry_run)

    def revert(self, name: str, change_id: int, *, timeout: float = 10.0, dry_run: bool = False
               ) -> list[OffsetChange]:
        """Move the partition of history row `change_id` back to its previous offset, through set_offset's
        gated path; the history then holds the revert, its message naming the change it reverts. A previous
        offset the log no longer holds is clamped into [log start, log end], and the result says so."""
        _check_timeout(timeout)
        if isinstance(change_id, bool) or not isinstance(change_id, int) or change_id <= 0:
            raise ConfigError(f"change_id: must be a positive integer (a history row's change_id), "
                              f"got {change_id!r}")
        stream = self._stream(name)
        self._record_history(stream)
        entry = self._store.history_entry(name, change_id)
        if entry is None:
            raise ConfigError(f"change_id: no change {change_id} in the history of stream {name!r}")
        where = f"{entry.topic}:{entry.partition}"
        if entry.status not in _OFFSET_CHANGES:
            raise ConfigError(f"change_id: change {change_id} is a poison message set aside ({entry.status.value} "
                              f"at {where}@{entry.offset}), not an offset change; it cannot be reverted")
        if entry.previous_offset is None:
            raise ConfigError(f"change_id: change {change_id} ({where} to {entry.offset}) has no previous offset "
                              f"(the partition had none when it was applied); there is nothing to revert to")
        note = f"revert of change {change_id}"
        spec = OffsetSpec(partitions={(entry.topic, entry.partition): Absolute(entry.previous_offset)})
        changes = self._move(name, spec, note, timeout, dry_run, note=note)
        return [replace(c, message="; ".join(m for m in (note, c.message) if m)) for c in changes]

    def _move(self, name: str, spec: OffsetSpec, shown: str, timeout: float, dry_run: bool,
              note: str | None = None) -> list[OffsetChange]:
        """Plan `spec`, record it as pending, hand it to a running stream, wait up to `timeout` (see set_offset).
        `note` becomes the history message of the changes once applied."""
        deadline = time.monotonic() + timeout
        stream = self._stream(name)
        with stream.lock:
            runner = self._running(stream)
            resolved, _ = self._resolve(stream, runner, spec, shown, deadline)
            order = [(r.topic, r.partition) for r in resolved]
            unchanged = {(r.topic, r.partition): OffsetChange(r.topic, r.partition, r.previous_offset, r.offset,
                                                              ChangeStatus.UNCHANGED, r.message)
                         for r in resolved if r.unchanged}   # not applied, not pending, not history
            plan = {(r.topic, r.partition): r for r in resolved if not r.unchanged}
            if dry_run:
                planned = {tp: OffsetChange(r.topic, r.partition, r.previous_offset, r.offset,
                                            ChangeStatus.CLAMPED if r.clamped else ChangeStatus.PLANNED, r.message)
                           for tp, r in plan.items()}
                return [planned.get(tp) or unchanged[tp] for tp in order]
            offsets = {tp: r.offset for tp, r in plan.items()}
            clamped = {tp for tp, r in plan.items() if r.clamped}
            previous = {tp: r.previous_offset for tp, r in plan.items()}
            notes = {tp: "; ".join(m for m in (note, r.message if r.clamped else "") if m)
                     for tp, r in plan.items()} if note else {}
            self._store.set_pending(name, offsets, clamped, previous, notes)
            stream.clamped = (stream.clamped - set(plan)) | clamped  # the last call wins, per partition
            applied, failed = runner.request_offsets(offsets, deadline - time.monotonic()) \
                if runner and offsets else ({}, {})
        changes = dict(unchanged)
        for tp, r in plan.items():
            if tp in applied:
                status = ChangeStatus.CLAMPED if r.clamped else ChangeStatus.APPLIED
                changes[tp] = OffsetChange(r.topic, r.partition, r.previous_offset, r.offset, status, r.message)
            else:
                why = ("stream is not running; applied at the first assignment after start" if runner is None
                       else failed.get(tp) or "not assigned to this stream's consumer yet (rebalance pending); "
                                              "applied when the group assigns it")
                changes[tp] = OffsetChange(r.topic, r.partition, r.previous_offset, r.offset,
                                           ChangeStatus.PENDING, "; ".join(m for m in (r.message, why) if m))
        return [changes[tp] for tp in order]

    def _resolve(self, stream: _Stream, runner: StreamRunner | None, spec: OffsetSpec, shown: str,
                 deadline: float) -> tuple[list, dict]:
        """Every partition the spec targets, resolved against the cluster now (stream.lock held), and the
        snapshots of the stream's partitions; OffsetSpecError naming `shown` when any cannot be resolved."""
        def left() -> float:
            return max(deadline - time.monotonic(), 0.1)
        query = self._query(stream)
        partitions = query.partitions(stream.config.topics, left())
        spec.check_against(partitions)
        positions = runner.snapshot().positions if runner else {}
        snapshots = query.snapshots([(t, p) for t in stream.config.topics for p in partitions[t]], positions,
                                    deadline=deadline)
        resolved = resolve(spec, snapshots, query.offsets_for_times, running=runner is not None,
                           lookup_group=lambda group, tps: query.group_committed(group, tps, left()))
        unresolved = [r for r in resolved if r.failed]
        if unresolved:
            raise OffsetSpecError(f"{shown}: " + _grouped_reasons(unresolved))
        return resolved, {(snap.topic, snap.partition): snap for snap in snapshots}

    def check(self, name: str, offset: object = "committed", *, limit: int = 10,
              timeout: float = 20.0) -> list[PreviewStatement]:
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
        stream = self._stream(name)
        with stream.lock:
            resolved, snapshots = self._resolve(stream, self._running(stream), spec, f"offset {offset!r}", deadline)
        starts = {(r.topic, r.partition): r.offset for r in resolved if r.offset is not None}
        left = max(deadline - time.monotonic(), 0.1)
        args = (stream.config, starts, {tp: snapshots[tp].log_end for tp in starts}, limit, left)
        if self._isolation == Isolation.PROCESS:
            return call_in_child(preview, *args, timeout=left, secrets=stream.config.secret_values(),
                                 what=f"check: the preview of transformation {stream.config.transform!r}")
        return preview(*args)

    def pending(self, name: str) -> list[PendingOffset]:
        """Offsets waiting for an assignment (a stopped stream, or partitions another member holds)."""
        self._stream(name)
        return self._store.pending_rows(name)

    def cancel_pending(self, name: str, *, timeout: float = 10.0) -> list[PendingOffset]:
        """Forget the stream's pending offsets: in the state store and in its running consumer; the rows
        cancelled. One applied meanwhile (its assignment came first) is in the history, not in the result."""
        _check_timeout(timeout)
        stream = self._stream(name)
        with stream.lock:
            runner = self._running(stream)
            if runner is not None:
                # Its poll thread drops them between batches; an assignment it handled before that has
                # recorded its change (and cleared its pending row) by the time this returns.
                runner.cancel_pending(timeout)
            self._record_history(stream)
            cancelled = self._store.take_pending(name)
            stream.clamped -= {(row.topic, row.partition) for row in cancelled}
        return cancelled

    def describe(self, name: str) -> list[PartitionOffsets]:
        """Per partition: committed, position, log start/end, lag, held by this stream's consumer, the
        offset its sink stores (exactly-once) and where it would resume if started now (`resume_point`)."""
        stream = self._stream(name)
        config = stream.config
        with stream.lock:
            query = self._query(stream)
            partitions = query.partitions(config.topics)
            runner = self._running(stream)
            seen = runner.snapshot() if runner else WorkerSnapshot()
            tps = [(t, p) for t in config.topics for p in partitions[t]]
            snapshots = query.snapshots(tps, seen.positions)
            missing = [tp for tp in tps if tp not in seen.stored]   # not assigned since its process started
            offline = self._stored_offsets(config, missing) if missing else {}
            stored = None if offline is None else {**offline, **seen.stored}   # None: the sink cannot be read
            pending = self._store.pending(name)
        resume = resume_offsets(config, snapshots, pending, stored)
        return [PartitionOffsets(s.topic, s.partition, s.committed, s.position, s.log_start, s.log_end,
                                 None if s.committed is None else max(s.log_end - s.committed, 0),
                                 (s.topic, s.partition) in seen.assigned,
                                 stored.get((s.topic, s.partition)) if stored else None,
                                 resume[(s.topic, s.partition)])
                for s in snapshots]

    def _stored_offsets(self, config: StreamConfig, partitions: list) -> dict | None:
        """An exactly-once stream's offsets read from its sink; None when the sink cannot be read."""
        if config.delivery != Delivery.EXACTLY_ONCE:
            return {}
        try:
            return read_stored_offsets(config.sink, config.name, config.sink_credentials(), self._output_policy(),
                                       partitions)
        except StreamError as exc:
            log.warning("stream %s: %s", config.name, redact(str(exc), config.secret_values()))
            return None

    def history(self, name: str, limit: int | None = None) -> list[HistoryEntry]:
        stream = self._stream(name)
        self._record_history(stream)
        return self._store.history(name, limit)

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

    def _running(self, stream: _Stream) -> StreamRunner | None:
        return stream.runner if stream.runner is not None and stream.runner.alive else None

    def _start_locked(self, stream: _Stream) -> None:
        config = stream.config
        self._release(stream)  # a stream that went to ERROR by itself left its sink or process behind
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
            raise StreamError(f"stream {config.name!r} failed to start: {reason}") from None

    def _new_runner(self, stream: _Stream) -> StreamRunner:
        config = stream.config
        events = StreamEvents(on_status=lambda status, error: self._on_status(stream, status, error),
                              on_applied=lambda changes: self._on_applied(stream, changes),
                              on_set_aside=lambda records: self._on_set_aside(stream, records),
                              on_stats=lambda stats, earlier=stream.stats: setattr(stream, "stats", earlier + stats))
        common = dict(pending=self._store.pending(config.name), output=self._output_policy(), retry=self._retry,
                      events=events)
        if self._isolation == Isolation.PROCESS:
            return ProcessRunner(config, **common, stop_timeout=self._stop_timeout,
                                 on_exit=lambda runner, cause: self._on_exit(stream, runner, cause))
        return ThreadRunner(config, **common)

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
        try:
            self._store.set_status(name, StreamStatus.ERROR, error)
        except StreamError as exc:
            log.warning("stream %s: cannot persist status: %s", name, exc)

    def _restart(self, stream: _Stream, crashed: StreamRunner) -> None:
        """The restart policy's start: from the committed offsets (and pending changes), as a start is."""
        with stream.lock:
            if self._closed or stream.runner is not crashed:
                return
            stream.restarts += 1
            try:
                self._start_locked(stream)
            except StreamError as exc:
                log.warning("stream %s: restart failed: %s", stream.config.name, exc)

    def _on_status(self, stream: _Stream, status: StreamStatus, error: str | None) -> None:
        stream.status, stream.error = status, error
        if status == StreamStatus.STOPPED:
            return  # stop()/close() store the final state and the desired state together
        try:
            self._store.set_status(stream.config.name, status, error)
        except StreamError as exc:
            log.warning("stream %s: cannot persist status: %s", stream.config.name, exc)

    def _on_applied(self, stream: _Stream, changes: list[AppliedOffset]) -> None:
        """Record applied changes (poll thread, maybe inside a rebalance callback).

        A partition applied at its assignment has no position before it: its
        previous offset is the one the change was planned against, as its pending
        row in the state store says. A change's note (e.g. "revert of change 12")
        becomes its history message.

        A state-store failure (a busy or full disk) must not stop the stream: the
        rows wait in memory, are retried with the next change or read, and the
        stream's error says so meanwhile.
        """
        try:
            pending = {(row.topic, row.partition): row for row in self._store.pending_rows(stream.config.name)}
        except Exception as exc:   # the store unreadable: recorded without what the plan said, not dropped
            log.warning("stream %s: %s", stream.config.name, exc)
            pending = {}
        for c in changes:
            tp = (c.topic, c.partition)
            planned = pending.get(tp)
            if planned is not None and planned.offset != c.offset:
                planned = None
            previous = c.previous_offset if c.previous_offset is not None or planned is None \
                else planned.previous_offset
            stream.unrecorded.append((c.topic, c.partition, previous, c.offset,
                                      ChangeStatus.CLAMPED if tp in stream.clamped else ChangeStatus.APPLIED,
                                      planned.message if planned else None))
        self._record_history(stream)

    def _on_set_aside(self, stream: _Stream, records: list[SetAside]) -> None:
        """Poison messages go to the history too: a skipped one is recorded nowhere else."""
        stream.unrecorded += [(r.topic, r.partition, None, r.offset,
                               ChangeStatus.DEAD_LETTERED if r.dead_lettered else ChangeStatus.SKIPPED, r.error)
                              for r in records]
        self._record_history(stream)

    def _record_history(self, stream: _Stream) -> None:
        with stream.history_lock:
            rows = list(stream.unrecorded)
            if not rows:
                return
            try:
                self._store.record_applied(stream.config.name, rows, {(t, p): o for t, p, _, o, status, _ in rows
                                                                      if status in _OFFSET_CHANGES})
            except StreamError as exc:
                stream.store_error = f"{exc} (offset history kept in memory, retried)"
                log.warning("stream %s: %s", stream.config.name, stream.store_error)
                return
            del stream.unrecorded[:len(rows)]
            stream.store_error = None

    def _check_transformation(self, config: StreamConfig) -> None:
        """Import the transformation to refuse a bad one at create. A stream host imports a user's module in a
        child process (its top-level code runs there, never in the host); the built-ins are the project's own."""
        if self._isolation == Isolation.PROCESS and not is_builtin(config.transform):
            locate_stream_transformation(config)
            what = f"transform: importing {config.transform!r}"
            try:
                call_in_child(check_stream_transformation, config, timeout=CHECK_IMPORT_TIMEOUT_S, what=what,
                              secrets=config.secret_values())
            except TransformError as exc:   # it died: a bad transformation all the same
                raise ConfigError(str(exc)) from None
        else:
            check_stream_transformation(config)

    def _output_policy(self) -> OutputPolicy:
        """Where this registry's file sinks may write: $MGSTREAMS_OUTPUT_DIRS, else <state dir>/output."""
        return OutputPolicy.for_state_dir(self.state_dir)

    def _open_query(self, config: StreamConfig) -> PartitionQuery:
        return PartitionQuery(config.bootstrap_servers, config.group_id,
                              {**config.configs, **config.kafka_credentials()}, timeout=self._query_timeout,
                              secrets=config.secret_values())

    def _query(self, stream: _Stream) -> PartitionQuery:
        if stream.query is None:
            stream.query = self._open_query(stream.config)
        return stream.query

    def _info(self, stream: _Stream) -> StreamInfo:
        c = stream.config
        runner = self._running(stream)
        counts = self._store.status_counts(c.name) if c.errors_tolerance == ErrorsTolerance.ALL else {}
        return StreamInfo(c.name, tuple(c.topics), c.group_id, c.bootstrap_servers, c.transform, c.sink,
                          stream.status, "; ".join(e for e in (stream.error, stream.store_error) if e) or None,
                          c.shown_configs(), mask_all(c.credentials),
                          c.batch_size, c.batch_interval_ms, c.restart.value,
                          runner.pid if runner else None, runner.rss_bytes() if runner else None,
                          stream.restarts, c.delivery.value, c.errors_tolerance.value, c.dead_letter_topic,
                          counts.get(ChangeStatus.DEAD_LETTERED, 0), counts.get(ChangeStatus.SKIPPED, 0),
                          stream.stats.records, stream.stats.batches, stream.stats.seconds_sum,
                          stream.stats.cumulative_buckets())


def _check_timeout(timeout: object) -> None:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ConfigError(f"timeout: must be a positive number of seconds, got {timeout!r}")


def _grouped_reasons(resolved) -> str:
    """`t:0..199 (200 partitions): reason` instead of 200 lines saying the same thing."""
    by_reason: dict[str, list] = {}
    for r in resolved:
        prefix = f"{r.topic}:{r.partition}: "
        reason = r.message[len(prefix):] if r.message.startswith(prefix) else r.message
        by_reason.setdefault(reason, []).append((r.topic, r.partition))
    parts = []
    for reason, tps in by_reason.items():
        topics = sorted({t for t, _ in tps})
        where = ", ".join(
            f"{t}:{min(ps)}..{max(ps)} ({len(ps)} partitions)" if len(ps) > 2 else ", ".join(f"{t}:{p}" for p in ps)
            for t in topics for ps in [sorted(p for tt, p in tps if tt == t)])
        parts.append(f"{where}: {reason}")
    return "; ".join(parts)


def stored_config(state_dir: str | os.PathLike, name: str) -> StreamConfig:
    """A stream's configuration, secrets included, read from a state directory without hosting it.

    For jobs that replay a stream's topics next to the host that runs it (the
    Spark backfill); the host's API never hands out secrets.
    """
    if not (Path(state_dir) / STATE_FILE).is_file():
        raise StreamNotFound(f"state_dir: no mgstreams state in {str(state_dir)!r}")
    store = StateStore(state_dir)
    try:
        for config, *_ in store.load_streams():
            if config.name == name:
                return config
    finally:
        store.close()
    raise StreamNotFound(f"name: no stream named {name!r} in {str(state_dir)!r}")
