"""Running streams: start, stop, drop, a process's exit and the restart policy, the runner per stream.

Each step runs under the stream's lock (stream_table). A stream gets a new
runner from the engines (engines.py: the one place an engine is picked) for each
run; what the runner reports (status, offset changes, records set aside, lost,
realigned, batch counts, outages) comes back through the StreamEvents made
here and is recorded in the state store (change_sets for the offsets). A stream
whose process dies is `error`, naming the cause, and its restart policy brings
it back with a backoff (restarts.py); a stopping host restarts nothing. A thread
that does not stop in time keeps its sink and its place (closing the sink under
a write, or starting a second consumer beside it, would be worse than saying the
stop failed); a process that does not stop in time is killed, and the stream
says so.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import NoReturn

from ...errors import ConfigError, StreamError, StreamStateError
from ...graph.sinks.policy import OutputPolicy
from ...group_policy import GroupPolicy
from ...model import RetryPolicy, StreamCaps, StreamInfo, StreamStatus
from ...redaction import redact
from ..runners.caps import check_running, running_processes
from ..runners.engine import RunRequest, StreamRunner
from ..runners.engines import Engines
from ..runners.restarts import RestartBackoff
from ..state.change_sets import ChangeSets
from ..state.state_store import StateStore
from ..stream.batch_stats import BatchStats
from ..stream.stream_events import StreamEvents
from .stream_info import info_of
from .stream_table import StreamEntry, StreamTable

log = logging.getLogger("mgstreams.registry")


class Lifecycle:
    """Start, stop, drop and restart streams (see the module docstring)."""

    def __init__(self, table: StreamTable, store: StateStore, changes: ChangeSets, engines: Engines, *,
                 group_policy: GroupPolicy, caps: StreamCaps, backoff: RestartBackoff, stop_timeout: float,
                 retry: RetryPolicy, processes: bool, output: Callable[[], OutputPolicy]):
        self._table, self._store, self._changes, self._engines = table, store, changes, engines
        self._group_policy, self._caps, self._backoff = group_policy, caps, backoff
        self._stop_timeout, self._retry, self._processes, self._output = stop_timeout, retry, processes, output
        self._slots = threading.Lock()   # counting running processes and taking a slot are one step

    # -- the calls -----------------------------------------------------------------
    def start(self, name: str) -> None:
        with self._table.locked(name) as stream:
            if stream.restarting is not None:
                raise StreamStateError(f"name: stream {name!r} is restarting to apply an alter")
            if stream.status == StreamStatus.ERROR and stream.running is not None:
                self.stop_locked(stream, keep_desired=True)  # it reported ERROR and is ending: let it end
            if stream.runner is not None and stream.runner.alive:
                state = "still stopping (its last stop timed out)" if stream.runner.stopping \
                    else f"already {stream.status.value}"
                raise StreamStateError(f"name: stream {name!r} is {state}")
            stream.failures = stream.restarts = 0
            self.start_locked(stream, why="start")

    def stop(self, name: str) -> None:
        """Stop consuming and keep the stream from being restarted; stopping a stopped stream is a no-op."""
        with self._table.locked(name) as stream:
            was = stream.status
            if stream.runner is not None:
                self.stop_locked(stream)
            self._store.set_status(name, stream.status, stream.error, desired_running=False)
        if was in (StreamStatus.STARTING, StreamStatus.RUNNING, StreamStatus.ERROR):
            log.info("stream %s: stopped (was %s)", name, was.value)
        self._changes.notify(name)   # set_offset calls waiting for it answer now

    def drop(self, name: str) -> StreamInfo:
        """Stop and forget the stream; a second drop (even a concurrent one) is StreamNotFound."""
        with self._table.locked(name) as stream:
            was = stream.status
            if stream.runner is not None:
                self.stop_locked(stream)
            info = info_of(stream, self._store, self._changes)
            if stream.query is not None:
                stream.query.close()
            self._store.delete_stream(name)
            stream.dropped = True
            with self._table.lock:
                self._table.streams.pop(name, None)
            self._changes.forget(name)
        log.info("stream %s: dropped (was %s)", name, was.value)
        self._changes.notify(name)
        return info

    def close_all(self, streams: list[StreamEntry]) -> list[str]:
        """Stop every stream at once (a host's shutdown takes one stop timeout), keeping their desired state;
        those that did not stop cleanly, and why."""
        failed: list[str] = []

        def close_one(stream: StreamEntry) -> None:  # every stream gets its stop, whatever happens to the others
            with stream.lock:
                try:
                    if stream.runner is not None:
                        self.stop_locked(stream, keep_desired=True)
                except StreamError as exc:
                    failed.append(f"{stream.config.name}: {exc}")
                if stream.query is not None:
                    stream.query.close()
                    stream.query = None
        with ThreadPoolExecutor(max_workers=max(len(streams), 1), thread_name_prefix="mgstreams-close") as pool:
            list(pool.map(close_one, streams))
        return failed

    # -- steps under the stream's lock ----------------------------------------------
    def start_locked(self, stream: StreamEntry, why: str) -> None:
        runner = self.prepared_runner(stream, why)
        try:
            runner.start()
        except StreamError as exc:
            self.start_failed(stream, why, exc)
        log.info("stream %s: %s: starting%s", stream.config.name, why, f" (pid {runner.pid})" if runner.pid else "")

    def prepared_runner(self, stream: StreamEntry, why: str) -> StreamRunner:
        """A new runner for the stream, recorded as starting (its start() is the caller's)."""
        config = stream.config
        self._release(stream)  # a stream that went to ERROR by itself left its sink or process behind
        try:   # a stored stream read back: the allowlists of today (bootstrap and Bolt hosts, group) apply to it
            config.validate()
            self._group_policy.check(config)
        except ConfigError as exc:
            self._refused(stream, why, exc)
        with self._slots:
            if self._processes:
                self._check_running(stream)
            try:
                runner = self._new_runner(stream)
            except ConfigError as exc:   # an engine this host does not have
                self._refused(stream, why, exc)
            stream.runner, stream.started_at, stream.exit_cause = runner, time.monotonic(), None
        try:
            self._store.set_status(config.name, StreamStatus.STARTING, None, desired_running=True)
        except StreamError as exc:
            self.start_failed(stream, why, exc)
        return runner

    def _refused(self, stream: StreamEntry, why: str, exc: ConfigError) -> NoReturn:
        stream.status, stream.error = StreamStatus.ERROR, f"not started: {exc}"
        self._store.set_status(stream.config.name, StreamStatus.ERROR, stream.error)
        log.warning("stream %s: %s refused: %s", stream.config.name, why, exc)
        raise exc

    def start_failed(self, stream: StreamEntry, why: str, exc: StreamError) -> NoReturn:
        config = stream.config
        reason = redact(str(exc), config.secret_values())
        self._release(stream)
        stream.status, stream.error = StreamStatus.ERROR, reason
        self._store.set_status(config.name, StreamStatus.ERROR, reason, desired_running=True)
        log.warning("stream %s: error: %s failed: %s", config.name, why, reason)
        raise StreamError(f"stream {config.name!r} failed to start: {reason}") from None

    def stop_locked(self, stream: StreamEntry, keep_desired: bool = False) -> None:
        """Stop the runner (see the module docstring)."""
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

    def _check_running(self, stream: StreamEntry) -> None:
        """StreamStateError naming $MGSTREAMS_MAX_RUNNING (the stream in error, saying so) past the cap."""
        runners = [s.runner for s in self._table.all() if s is not stream and s.runner is not None]
        tasks = getattr(stream.config, "tasks", 1)
        try:
            check_running(running_processes(runners), tasks if isinstance(tasks, int) else 1, self._caps,
                          stream.config.name)
        except StreamStateError as exc:
            stream.status, stream.error = StreamStatus.ERROR, f"not started: {exc}"
            self._store.set_status(stream.config.name, StreamStatus.ERROR, stream.error)
            log.warning("stream %s: %s", stream.config.name, stream.error)
            raise

    def _new_runner(self, stream: StreamEntry) -> StreamRunner:
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
        return self._engines.runner(RunRequest(
            config, pending=lambda: self._changes.pending_moves(name), output=self._output(), retry=self._retry,
            events=events, stop_timeout=self._stop_timeout, memory_limit_mb=self._caps.stream_memory_mb,
            on_exit=lambda runner, cause: self._on_exit(stream, runner, cause), backoff=self._backoff,
            lock=stream.lock, host_stopping=lambda: self._table.closing, marks=self._store.mark_key(name)))

    def _release(self, stream: StreamEntry) -> None:
        if stream.runner is not None:
            stream.runner.close()
            stream.runner = None

    # -- what a runner reports ------------------------------------------------------
    def _on_exit(self, stream: StreamEntry, runner: StreamRunner, cause: str) -> None:
        """A stream's process died (its pipe's reader thread): say so, and restart it if its policy says so."""
        if self._table.closed or stream.runner is not runner:
            return  # stopped, dropped or restarted meanwhile
        name = stream.config.name
        stream.exit_cause = cause
        outcome = self._backoff.after_exit(cause, stream.config.restart, failures=stream.failures,
                                           ran_s=time.monotonic() - stream.started_at,
                                           restarts=stream.restarts, host_stopping=self._table.closing)
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

    def _restart(self, stream: StreamEntry, crashed: StreamRunner) -> None:
        """The restart policy's start: from the committed offsets (and pending changes), as a start is."""
        with stream.lock:
            if self._table.stopping() or stream.dropped or stream.runner is not crashed \
                    or stream.restarting is not None:   # an alter's restart starts it
                return
            stream.restarts += 1
            try:
                self.start_locked(stream, why=f"restart {stream.restarts} (restart: {stream.config.restart.value})")
            except StreamError as exc:
                log.warning("stream %s: restart failed: %s", stream.config.name, exc)

    def _on_status(self, stream: StreamEntry, status: StreamStatus, error: str | None) -> None:
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
