"""The stream registry: stream names to running streams, persisted, with offset control.

The facade every surface calls (the host's API, the CLI, embedding code); each
call is handed to the part that owns it:

- stream_table: the streams by name, each with its lock (a call's lookup and
  lock are one step; nothing waits while holding it);
- definitions: create and alter (an alter of a running stream restarts it);
- lifecycle: start, stop, drop, a process's exit and the restart policy, the
  runner per stream, picked by engines (engine.py: the engine seam);
- offset_calls: set/revert/cancel/pending/history/describe/check/lost records,
  over change_sets (the pending rows and their waits) and positions;
- stream_info: what describe and list show.

With `isolation=Isolation.PROCESS` (the stream host) each running stream lives
in a child process of its own (stream_process): a process that dies makes its
stream `error`, naming the cause, and the stream's restart policy brings it back
from its committed offsets. A registry owns its state directory (StateLock):
constructing it restarts the streams that were running, and a second registry on
the same directory, in any process, is refused. Other processes reach the
streams through the host that owns the registry (`mgstreams serve`), never by
opening it again.
"""
from __future__ import annotations

import builtins
import logging
import os
import socket
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..config import StreamConfig
from ..errors import StreamError
from ..graph.sinks.policy import OutputPolicy
from ..group_policy import GroupPolicy
from ..kafka.queries import PartitionQuery
from ..model import (
    CHECK_TIMEOUT_MS,
    DEFAULT_RETRY,
    DEFAULT_TIMEOUT_MS,
    STOP_TIMEOUT_S,
    HistoryEntry,
    OffsetChange,
    PartitionKey,
    PartitionOffsets,
    PendingOffset,
    PreviewStatement,
    RetryPolicy,
    StreamCaps,
    StreamInfo,
    StreamStatus,
)
from .host.admission import admit
from .host.definitions import Definitions
from .host.lifecycle import Lifecycle
from .host.offset_calls import OffsetCall, OffsetCalls
from .host.positions import StreamPositions
from .host.stream_info import info_of
from .host.stream_table import StreamEntry, StreamTable
from .runners.caps import caps_from_env
from .runners.engine import Engine
from .runners.engines import KAFKA, Engines
from .runners.restarts import DEFAULT_RESTART_BACKOFF, RestartBackoff
from .runners.runner import Isolation
from .state.change_sets import ChangeSets
from .state.state_lock import StateLock
from .state.state_store import StateStore
from .state.state_store import stored_config as stored_config  # re-exported: its public home before

log = logging.getLogger("mgstreams.registry")


DEFAULT_GROUP_POLICY = GroupPolicy()


class StreamRegistry:
    """The facade (see the module docstring). `engines`/`engine_of`: engines beyond the built-in "kafka" one, and
    which one a stream's config selects (engine.py)."""

    def __init__(self, state_dir: str | os.PathLike, *, retry: RetryPolicy = DEFAULT_RETRY,
                 query_timeout: float = 10.0, stop_timeout: float = STOP_TIMEOUT_S, holder: str | None = None,
                 isolation: Isolation = Isolation.THREAD, restart_backoff: RestartBackoff = DEFAULT_RESTART_BACKOFF,
                 group_policy: GroupPolicy = DEFAULT_GROUP_POLICY, caps: StreamCaps | None = None,
                 engines: Mapping[str, Engine] | None = None,
                 engine_of: Callable[[StreamConfig], str] = lambda config: KAFKA):
        caps = caps if caps is not None else caps_from_env()   # a bad cap variable (model.StreamCaps) stops us before the lock
        self._dir_lock = StateLock(state_dir, holder or f"pid {os.getpid()} on {socket.gethostname()}")
        try:
            self._store = StateStore(state_dir)
        except BaseException:
            self._dir_lock.release()
            raise
        self.state_dir = Path(state_dir)
        self._query_timeout = query_timeout
        self._isolation = Isolation(isolation)
        self._group_policy = group_policy
        self._changes = ChangeSets(self._store)
        self._positions = StreamPositions(self._store.pending, self._output_policy)
        self._table = StreamTable(self._open_query, self._check_config)
        self._streams = self._table.streams   # name -> StreamEntry (tests read it)
        self._lifecycle = Lifecycle(self._table, self._store, self._changes,
                                    Engines(self._isolation, engines, engine_of), group_policy=group_policy,
                                    caps=caps, backoff=restart_backoff, stop_timeout=stop_timeout, retry=retry,
                                    processes=self._isolation == Isolation.PROCESS, output=self._output_policy)
        self._definitions = Definitions(self._table, self._store, self._changes, self._positions, self._lifecycle,
                                        admit=self._admit, group_policy=group_policy, caps=caps,
                                        stop_timeout=stop_timeout, open_query=self._open_query)
        self._offsets = OffsetCalls(self._table, self._store, self._changes, self._positions,
                                    in_child=self._isolation == Isolation.PROCESS)
        restart = []
        for config, desired_running, status, error in self._store.load_streams():
            if status in (StreamStatus.STARTING, StreamStatus.RUNNING):
                status = StreamStatus.STOPPED  # its consumer died with the old process
            self._streams[config.name] = StreamEntry(config, status, error)
            if desired_running:
                restart.append(config.name)
        for name in restart:
            try:
                self.start(name)
            except StreamError:
                pass   # start_locked logged why, and the stream is `error` saying so

    # -- lifecycle ----------------------------------------------------------
    def create(self, config: StreamConfig) -> StreamInfo:
        """Validate everything (including the cluster and topics), then store; nothing on failure."""
        self._definitions.create(config)
        return self.get(config.name)

    def alter(self, name: str, changes: Mapping[str, Any]) -> StreamInfo:
        """Change a stream's batch size, batch interval, transformation, sink or configs (`configs` merged, a
        null value removing a key), validated as a create is, before anything is built; nothing changes on a
        refusal. The state store keeps the new config; pending offset changes and the history stay. A running
        (or starting) stream restarts to apply it, from its committed offsets and pending changes, before this
        returns; its lock is not held while the old run finishes its batch (the stream says it restarts). A sink
        change is an offset change too (sink_change): the new sink continues where the stream stood, or from
        `from`."""
        self._definitions.alter(name, changes)
        return self.get(name)

    def start(self, name: str) -> StreamInfo:
        self._lifecycle.start(name)
        return self.get(name)

    def stop(self, name: str) -> StreamInfo:
        """Stop consuming and keep the stream from being restarted; stopping a stopped stream is a no-op."""
        self._lifecycle.stop(name)
        return self.get(name)

    def drop(self, name: str) -> StreamInfo:
        """Stop and forget the stream; a second drop (even a concurrent one) is StreamNotFound."""
        return self._lifecycle.drop(name)

    def list(self) -> list[StreamInfo]:
        streams = self._table.all()
        return [self._info(s) for s in sorted(streams, key=lambda s: s.config.name)]

    def get(self, name: str) -> StreamInfo:
        return self._info(self._table.entry(name))

    def config(self, name: str) -> StreamConfig:
        """The stream's configuration, secrets included: for helpers in this process that connect as the
        stream does (the lag sampler's reader), never for an answer to a client."""
        return self._table.entry(name).config

    def begin_close(self) -> None:
        """The host is stopping (a signal): from now on no stream is restarted (a process that ends is not
        replaced) and calls waiting for an offset change answer at once; close() follows."""
        self._table.closing = True
        self._changes.notify()

    def close(self) -> None:
        """Stop every consumer of this process; streams keep their desired state for the next start."""
        self._table.closing = True
        with self._table.lock:
            if self._table.closed:
                return
            self._table.closed = True
            streams = list(self._table.streams.values())
        failed = self._lifecycle.close_all(streams)
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
        return self._offsets.set_offset(name, offset, timeout=timeout, dry_run=dry_run, arrived=arrived)

    def request_offset(self, name: str, offset: object, *, timeout: float = DEFAULT_TIMEOUT_MS / 1000,
                       dry_run: bool = False, arrived: float | None = None) -> OffsetCall:
        """set_offset up to its hand-off: the change is recorded and handed to the stream's gate; the caller
        waits for it (or not) and reads `answer()` (the host awaits it holding no thread)."""
        return self._offsets.request_offset(name, offset, timeout=timeout, dry_run=dry_run, arrived=arrived)

    def revert(self, name: str, change_id: int, *, timeout: float = DEFAULT_TIMEOUT_MS / 1000, dry_run: bool = False,
               partitions: builtins.list | None = None, arrived: float | None = None) -> builtins.list[OffsetChange]:
        """Move every partition of change `change_id` (one set_offset call; or only `partitions`) back to its
        previous offset, through set_offset's gated path; the history then holds the revert, its message naming
        the change it reverts. A previous offset the log no longer holds is clamped into [log start, log end],
        and the result says so."""
        return self._offsets.revert(name, change_id, timeout=timeout, dry_run=dry_run, partitions=partitions,
                                    arrived=arrived)

    def request_revert(self, name: str, change_id: int, *, timeout: float = DEFAULT_TIMEOUT_MS / 1000,
                       dry_run: bool = False, partitions: builtins.list | None = None,
                       arrived: float | None = None) -> OffsetCall:
        """revert up to its hand-off (as request_offset)."""
        return self._offsets.request_revert(name, change_id, timeout=timeout, dry_run=dry_run,
                                            partitions=partitions, arrived=arrived)

    def watch(self, callback: Callable[[str | None], None]) -> Callable[[], None]:
        """Call `callback(stream name)` (None: any stream) from any thread whenever a pending change or a
        stream's state may have changed; the function that stops it."""
        return self._changes.watch(callback)

    def unsettled(self, name: str, change_ids: Iterable[int]) -> set[int]:
        """Those of `change_ids` that still have a pending row."""
        return self._changes.unsettled(name, change_ids)

    def check(self, name: str, offset: object = "committed", *, limit: int = 10,
              timeout: float = CHECK_TIMEOUT_MS / 1000) -> builtins.list[PreviewStatement]:
        """The statements the stream's transformation makes of up to `limit` records per partition, from
        where `offset` (any set_offset spec) resolves: Memgraph's CHECK STREAM at any offset. Read without
        joining the stream's group and without committing; nothing is written anywhere (no sink is opened).
        A partition the spec leaves alone is not read; one a group never committed is read from its offset.
        "committed" (the default) previews from where the stream resumes (`describe`'s resume_offset: a pending
        change, an exactly-once sink's stored offset, the committed offset, else auto.offset.reset), so a
        stream that has committed nothing yet previews what it would read first."""
        return self._offsets.check(name, offset, limit=limit, timeout=timeout)

    def pending(self, name: str) -> builtins.list[PendingOffset]:
        """Offsets waiting for an assignment (a stopped stream, or partitions another member holds)."""
        return self._offsets.pending(name)

    def cancel_pending(self, name: str, *, timeout: float = DEFAULT_TIMEOUT_MS / 1000) -> builtins.list[PendingOffset]:
        """Cancel the stream's pending offsets: in the state store first (from then on never pending, never handed
        to a stream process), then in its running stream's gate, whenever it hears of it (a cancelled change is
        never applied later); the rows cancelled. One applied before the gate heard (its assignment came first)
        is in the history, not in the result."""
        return self._offsets.cancel_pending(name, timeout=timeout)

    def describe(self, name: str) -> builtins.list[PartitionOffsets]:
        """Per partition: committed, position, log start/end, lag, held by this stream's consumer, the
        offset its sink stores (exactly-once) and where it would resume if started now (`resume_point`)."""
        return self._offsets.describe(name)

    def history(self, name: str, limit: int | None = None) -> builtins.list[HistoryEntry]:
        return self._offsets.history(name, limit)

    def records_lost(self, name: str) -> dict[PartitionKey, int]:
        """Records that left the log before the stream read them, per partition (its `lost` history rows)."""
        return self._offsets.records_lost(name)

    def acknowledge_loss(self, name: str) -> StreamInfo:
        """An operator has seen the stream's lost records: its verdict no longer says ERR for them (the count
        and the history rows stay)."""
        self._offsets.acknowledge_loss(name)
        return self.get(name)

    # -- what the parts are given ----------------------------------------------------
    def _info(self, stream: StreamEntry) -> StreamInfo:
        return info_of(stream, self._store, self._changes)

    def _admit(self, config: StreamConfig, before: StreamConfig | None) -> None:
        admit(config, before, self._isolation, self._output_policy, self._open_query)

    def _check_config(self, config: StreamConfig) -> None:
        config.validate()
        self._group_policy.check(config)

    def _output_policy(self) -> OutputPolicy:
        """Where this registry's file sinks may write: $MGSTREAMS_OUTPUT_DIRS, else <state dir>/output."""
        return OutputPolicy.for_state_dir(self.state_dir)

    def _open_query(self, config: StreamConfig) -> PartitionQuery:
        return PartitionQuery(config.bootstrap.text, config.group_id, config.kafka_settings(),
                              timeout=self._query_timeout, secrets=config.secret_values())
