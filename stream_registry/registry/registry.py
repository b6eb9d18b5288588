"""The stream registry: stream names to consumers, persisted, with offset control.

Calls on one stream are serialized by a per-stream lock; the poll thread of
each running stream is the only one touching its consumer (see worker). A
registry owns its state directory (StateLock): constructing it restarts the
streams that were running, and a second registry on the same directory, in
any process, is refused. Other processes reach the streams through the host
that owns the registry (`mgstreams serve`), never by opening it again.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import StreamConfig
from ..errors import ConfigError, OffsetSpecError, StreamError, StreamNotFound, StreamStateError
from ..kafka.queries import PartitionQuery
from ..offset_spec import ChangeStatus, parse_offset_spec, resolve
from ..offsets import HistoryEntry, OffsetChange, PartitionOffsets
from ..redaction import mask_all, redact
from ..graph.sinks import OutputPolicy, open_sink, validate_sink_uri
from .state_lock import StateLock
from .state_store import STATE_FILE, StateStore
from ..stream_info import StreamInfo, StreamStatus
from .worker import AppliedOffset, RetryPolicy, StreamWorker
from ..graph.transform import load_transformation

log = logging.getLogger("mgstreams.registry")
TP = tuple[str, int]


@dataclass
class _Stream:
    config: StreamConfig
    status: StreamStatus
    error: str | None = None
    worker: StreamWorker | None = None
    sink: Any = None
    query: PartitionQuery | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    clamped: set[TP] = field(default_factory=set)
    unrecorded: list = field(default_factory=list)   # applied changes the state store has not taken yet
    store_error: str | None = None                    # why they wait (shown with the status)
    history_lock: threading.Lock = field(default_factory=threading.Lock)


class StreamRegistry:
    def __init__(self, state_dir: str | os.PathLike, *, retry: RetryPolicy = RetryPolicy(),
                 query_timeout: float = 10.0, stop_timeout: float = 30.0, holder: str | None = None):
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
        self._load_transformation(config)
        try:
            validate_sink_uri(config.sink, self._output_policy())
        except StreamError as exc:
            raise ConfigError(redact(str(exc), config.secret_values())) from None
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
            if stream.worker is not None and stream.worker.alive:
                state = "still stopping (its last stop timed out)" if stream.worker.stopping \
                    else f"already {stream.status.value}"
                raise StreamStateError(f"name: stream {name!r} is {state}")
            self._start_locked(stream)
        return self.get(name)

    def stop(self, name: str) -> StreamInfo:
        """Stop consuming and keep the stream from being restarted; stopping a stopped stream is a no-op."""
        stream = self._stream(name)
        with stream.lock:
            if stream.worker is not None:
                self._stop_locked(stream)
            self._store.set_status(name, stream.status, stream.error, desired_running=False)
        return self.get(name)

    def drop(self, name: str) -> StreamInfo:
        stream = self._stream(name)
        with stream.lock:
            if stream.worker is not None:
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

    def close(self) -> None:
        """Stop every consumer of this process; streams keep their desired state for the next start."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            streams = list(self._streams.values())
        failed = []
        for stream in streams:  # every stream gets its stop, whatever happened to the ones before
            with stream.lock:
                try:
                    if stream.worker is not None:
                        self._stop_locked(stream, keep_desired=True)
                except StreamError as exc:
                    failed.append(f"{stream.config.name}: {exc}")
                if stream.query is not None:
                    stream.query.close()
                    stream.query = None
        self._store.close()
        self._dir_lock.release()
        if failed:
            log.error("registry closed; streams that did not stop cleanly: %s", "; ".join(failed))

    # -- offsets --------------------------------------------------------------
    def set_offset(self, name: str, offset: object, *, timeout: float = 10.0,
                   dry_run: bool = False) -> list[OffsetChange]:
        """Set the offset of every partition the spec targets; see the module docstring of offset_spec."""
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ConfigError(f"timeout: must be a positive number of seconds, got {timeout!r}")
        spec = parse_offset_spec(offset)
        deadline = time.monotonic() + timeout
        stream = self._stream(name)
        with stream.lock:
            worker = stream.worker if stream.worker is not None and stream.worker.alive else None
            query = self._query(stream)
            partitions = query.partitions(stream.config.topics, max(deadline - time.monotonic(), 0.1))
            spec.check_against(partitions)
            positions = worker.snapshot()[1] if worker else {}
            snapshots = query.snapshots([(t, p) for t in stream.config.topics for p in partitions[t]], positions,
                                        deadline=deadline)
            resolved = resolve(spec, snapshots, query.offsets_for_times, running=worker is not None)
            unresolved = [r for r in resolved if r.failed]
            if unresolved:
                raise OffsetSpecError(f"offset {offset!r}: " + _grouped_reasons(unresolved))
            plan = {(r.topic, r.partition): r for r in resolved}
            if dry_run:
                return [OffsetChange(r.topic, r.partition, r.previous_offset, r.offset,
                                     ChangeStatus.CLAMPED if r.clamped else ChangeStatus.PLANNED, r.message)
                        for r in resolved]
            offsets = {tp: r.offset for tp, r in plan.items()}
            clamped = {tp for tp, r in plan.items() if r.clamped}
            self._store.set_pending(name, offsets, clamped)
            stream.clamped = (stream.clamped - set(plan)) | clamped  # the last call wins, per partition
            applied, failed = worker.request_offsets(offsets, deadline - time.monotonic()) if worker else ({}, {})
        changes = []
        for tp, r in plan.items():
            if tp in applied:
                status = ChangeStatus.CLAMPED if r.clamped else ChangeStatus.APPLIED
                changes.append(OffsetChange(r.topic, r.partition, r.previous_offset, r.offset, status, r.message))
            else:
                why = ("stream is not running; applied at the first assignment after start" if worker is None
                       else failed.get(tp) or "not assigned to this stream's consumer yet (rebalance pending); "
                                              "applied when the group assigns it")
                changes.append(OffsetChange(r.topic, r.partition, r.previous_offset, r.offset,
                                            ChangeStatus.PENDING, "; ".join(m for m in (r.message, why) if m)))
        return changes

    def describe(self, name: str) -> list[PartitionOffsets]:
        """Per partition: committed, position, log start/end, lag, held by this stream's consumer."""
        stream = self._stream(name)
        with stream.lock:
            query = self._query(stream)
            partitions = query.partitions(stream.config.topics)
            worker = stream.worker if stream.worker is not None and stream.worker.alive else None
            assigned, positions, _ = worker.snapshot() if worker else (set(), {}, {})
            snapshots = query.snapshots([(t, p) for t in stream.config.topics for p in partitions[t]], positions)
        return [PartitionOffsets(s.topic, s.partition, s.committed, s.position, s.log_start, s.log_end,
                                 None if s.committed is None else max(s.log_end - s.committed, 0),
                                 (s.topic, s.partition) in assigned) for s in snapshots]

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

    def _start_locked(self, stream: _Stream) -> None:
        config = stream.config
        self._release(stream)  # a worker that went to ERROR by itself left its sink open
        try:
            transformation = self._load_transformation(config)
            stream.sink = open_sink(config.sink, config.sink_credentials(), self._output_policy())
            worker = StreamWorker(config, transformation, stream.sink,
                                  pending=self._store.pending(config.name),
                                  on_status=lambda status, error: self._on_status(stream, status, error),
                                  on_applied=lambda changes: self._on_applied(stream, changes),
                                  retry=self._retry)
            stream.worker = worker
            self._store.set_status(config.name, StreamStatus.STARTING, None, desired_running=True)
            worker.start()
        except StreamError as exc:
            reason = redact(str(exc), config.secret_values())
            self._release(stream)
            stream.status, stream.error = StreamStatus.ERROR, reason
            self._store.set_status(config.name, StreamStatus.ERROR, reason, desired_running=True)
            raise StreamError(f"stream {config.name!r} failed to start: {reason}") from None

    def _stop_locked(self, stream: _Stream, keep_desired: bool = False) -> None:
        """Stop the worker; one that does not stop in time keeps its sink and its place.

        Closing the sink under a thread still writing to it, or letting a second
        consumer start beside it, would be worse than reporting the stop failed.
        """
        worker = stream.worker
        if worker is not None:
            try:
                worker.stop(self._stop_timeout)
            except StreamError as exc:
                stream.error = f"{exc}; it is still finishing its batch, stop it again later"
                raise StreamStateError(f"name: {stream.error}") from None
        self._release(stream)
        if stream.status != StreamStatus.ERROR:
            stream.status, stream.error = StreamStatus.STOPPED, None
        if not keep_desired:
            self._store.set_status(stream.config.name, stream.status, stream.error, desired_running=False)

    def _release(self, stream: _Stream) -> None:
        stream.worker = None
        if stream.sink is not None:
            try:
                stream.sink.close()
            except Exception as exc:  # a sink that fails to close must not block stop
                log.warning("stream %s: sink close failed: %s", stream.config.name, exc)
            stream.sink = None

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

        A state-store failure (a busy or full disk) must not stop the stream: the
        rows wait in memory, are retried with the next change or read, and the
        stream's error says so meanwhile.
        """
        stream.unrecorded += [(c.topic, c.partition, c.previous_offset, c.offset,
                               ChangeStatus.CLAMPED if (c.topic, c.partition) in stream.clamped
                               else ChangeStatus.APPLIED) for c in changes]
        self._record_history(stream)

    def _record_history(self, stream: _Stream) -> None:
        with stream.history_lock:
            rows = list(stream.unrecorded)
            if not rows:
                return
            try:
                self._store.record_applied(stream.config.name, rows, {(t, p): o for t, p, _, o, _ in rows})
            except StreamError as exc:
                stream.store_error = f"{exc} (offset history kept in memory, retried)"
                log.warning("stream %s: %s", stream.config.name, stream.store_error)
                return
            del stream.unrecorded[:len(rows)]
            stream.store_error = None

    def _output_policy(self) -> OutputPolicy:
        """Where this registry's file sinks may write: $MGSTREAMS_OUTPUT_DIRS, else <state dir>/output."""
        return OutputPolicy.for_state_dir(self.state_dir)

    def _load_transformation(self, config: StreamConfig):
        try:
            return load_transformation(config.transform, search_dirs=query_module_dirs())
        except StreamError as exc:
            text = str(exc)
            raise ConfigError(text if text.startswith("transform") else f"transform: {text}") from None

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
        return StreamInfo(c.name, tuple(c.topics), c.group_id, c.bootstrap_servers, c.transform, c.sink,
                          stream.status, "; ".join(e for e in (stream.error, stream.store_error) if e) or None,
                          c.shown_configs(), mask_all(c.credentials),
                          c.batch_size, c.batch_interval_ms)


def query_module_dirs() -> list[str]:
    """The bundled query modules directory; load_transformation adds MGSTREAMS_QUERY_MODULES_DIR itself."""
    bundled = Path(__file__).resolve().parents[2] / "query_modules"
    return [str(bundled)] if bundled.is_dir() else []


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
