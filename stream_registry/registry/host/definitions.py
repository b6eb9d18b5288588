"""What a stream is: create and alter, validated before anything is built, nothing changed on a refusal.

An alter of a running (or starting) stream restarts it to apply the new config,
from its committed offsets and pending changes, before the call returns; the
stream's lock is not held while the old run finishes its batch nor while the
new one starts (the stream says it restarts meanwhile, and offset changes made
then are handed to the new run once it runs). A sink change is an offset change
too (sink_change): the new sink continues where the stream stood, or from `from`.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from ...config import OPTION_FIELDS, StreamConfig, alter_fields
from ...errors import ConfigError, StreamError, StreamExists, StreamStateError
from ...group_policy import GroupPolicy
from ...model import DEFAULT_TIMEOUT_MS, PartitionKey, PendingMove, StreamCaps, StreamStatus
from ..runners.caps import check_streams
from ..runners.engine import StreamRunner
from ..state.change_sets import ChangeSets
from ..state.state_store import StateStore
from .admission import described, shown_change
from .lifecycle import Lifecycle
from .positions import StreamPositions
from .sink_change import carried_over, prepare, sink_change, split_from
from .stream_table import StreamEntry, StreamTable

log = logging.getLogger("mgstreams.registry")


class Definitions:
    """Create and alter (see the module docstring). `admit(config, before)` runs admission's checks (it may ask
    the cluster: no lock is held meanwhile)."""

    def __init__(self, table: StreamTable, store: StateStore, changes: ChangeSets, positions: StreamPositions,
                 lifecycle: Lifecycle, *, admit: Callable[[StreamConfig, StreamConfig | None], None],
                 group_policy: GroupPolicy, caps: StreamCaps, stop_timeout: float,
                 open_query: Callable[[StreamConfig], Any]):
        self._table, self._store, self._changes, self._positions = table, store, changes, positions
        self._open_query = open_query
        self._lifecycle, self._admit, self._group_policy = lifecycle, admit, group_policy
        self._caps, self._stop_timeout = caps, stop_timeout

    def create(self, config: StreamConfig) -> None:
        """Validate everything (including the cluster and topics), then store; nothing on failure."""
        if not isinstance(config, StreamConfig):
            raise ConfigError(f"config: expected a StreamConfig, got {type(config).__name__}")
        config.validate()
        config = config.with_group()
        self._group_policy.check(config)
        table = self._table
        with table.lock:
            if config.name in table.streams:
                raise StreamExists(f"name: a stream named {config.name!r} already exists")
        self._admit(config, None)
        with table.lock:
            if config.name in table.streams:
                raise StreamExists(f"name: a stream named {config.name!r} already exists")
            check_streams(len(table.streams), self._caps)
            self._store.insert_stream(config)
            table.streams[config.name] = StreamEntry(config, StreamStatus.CREATED)
        log.info("stream %s: created (%s)", config.name, described(config))

    def alter(self, name: str, changes: Mapping[str, Any]) -> None:
        """Change a stream's batch size, batch interval, transformation, sink or configs (`configs` merged, a
        null value removing a key), validated as a create is, before anything is built; nothing changes on a
        refusal. The state store keeps the new config; pending offset changes and the history stay."""
        changes, start_from = split_from(changes)
        changes = alter_fields(changes)   # Kafka Connect's option names too, as create takes them
        before = self._table.entry(name).config
        config = before.altered(changes)
        moving = sink_change(before, config, start_from)
        self._group_policy.check(config)
        self._admit(config, before)   # no lock held: it may wait for the cluster
        plan: list | None = None
        partitions: list[PartitionKey] = []
        if moving is not None:   # where the new sink starts, or the partitions to carry over (asks the cluster)
            _, runner, _, query = self._table.view(name)
            if moving.cluster:   # resolved on the new cluster, with the new config's client
                query = self._open_query(config)
            try:
                plan, partitions = prepare(moving, config if moving.cluster else before, query, runner,
                                           self._positions, time.monotonic() + DEFAULT_TIMEOUT_MS / 1000)
            finally:
                if moving.cluster:
                    query.close()
        apply_later: Callable[[], None] | None = None
        with self._table.locked(name) as stream:
            if stream.config is not before:
                raise StreamStateError(f"name: stream {name!r} was altered meanwhile; read it and alter it again")
            if stream.restarting is not None:
                raise StreamStateError(f"name: stream {name!r} is restarting to apply an earlier alter; alter it "
                                       f"again once it runs")
            old = stream.running

            def apply() -> None:
                """Record the new config (and a sink change's offset change), under the stream's lock. Where a
                stream stood, carried over to its new sink, is read once it stopped (a StreamError: nothing
                changed)."""
                nonlocal plan
                stood: dict[PartitionKey, int] = {}
                if moving is not None and plan is None:
                    plan, stood = carried_over(before, partitions, self._positions.stored_offsets,
                                               self._store.pending(name))
                self._store.update_config(config, pending_from=stood)
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

    def _restart_altered(self, stream: StreamEntry, old: StreamRunner, apply: Callable[[], None] | None) -> None:
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
            if stream.restarting is not old or stream.dropped or self._table.stopping():
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
                runner = self._lifecycle.prepared_runner(stream, why)
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
                    self._lifecycle.start_failed(stream, why, failed)
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
