"""The engine seam: what a running stream is, to the registry, whatever runs it.

The registry holds one `StreamRunner` per running stream and drives it through
this interface only: start and stop it, ask whether it is alive, read its
processes and its snapshot, hand it offset changes and cancels. It learns what
the stream does from the StreamEvents it gave it (status, persisted offset
changes, records set aside, batch counts, realignments, lost records, outages).
Every guarantee of an offset change is the engine's to keep: a change is
applied only when the partition is assigned to it, and reported persisted only
once it is committed (or stored with a batch).

Engines today (engines.py builds them): `ThreadRunner` (runner.py: a poll
thread of this process), `ProcessRunner` (stream_process.py: a child process
per stream) and `TaskRunner` (task_runner.py: N member processes of one
group, itself a StreamRunner over N of the others).

How a new engine plugs in (a Spark query, say):
1. Write a class with the members of `StreamRunner` below. It may live in a
   library above this one (spark_bridge): stream_registry never imports it.
2. Write a factory `Engine = Callable[[RunRequest], StreamRunner]`: the
   request carries the stream's config, its pending offset changes (start from
   them: read them when the runner is made), the events to report through, and the registry's policies.
3. Hand it to the registry by name: `StreamRegistry(..., engines={"spark":
   factory}, engine_of=lambda config: ...)` (the application does, e.g.
   `mgstreams serve`). `engines.Engines.runner` is the one place the registry
   picks an engine for a stream; the built-in one is named "kafka".
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ...config import StreamConfig
from ...graph.sinks.policy import OutputPolicy
from ...model import GateEvent, PartitionKey, PendingMove, RetryPolicy, WorkerSnapshot
from ..stream.change_marks import MarkKey
from ..stream.stream_events import StreamEvents
from .restarts import RestartBackoff


class StreamRunner(Protocol):
    """A running stream as the registry sees it (see the module docstring)."""
    @property
    def pid(self) -> int | None:
        """Its (first) process; None before it is spawned. This host's pid for a thread of the host."""
    @property
    def pids(self) -> tuple[int, ...]:
        """Every process it runs in, spawned so far (one per task)."""
    @property
    def restarts(self) -> int:
        """Restarts it made by itself (a task brought back alone); the registry counts its own."""
    def start(self, timeout: float = 30.0) -> None:
        """Start, or raise StreamError saying why not (nothing left running)."""
    def stop(self, timeout: float) -> str | None:
        """Stop cleanly; a note when that took force (a killed process), StreamError when it failed."""
    @property
    def alive(self) -> bool: ...
    @property
    def stopping(self) -> bool: ...
    def snapshot(self) -> WorkerSnapshot:
        """The partitions it holds, where they stand, the changes waiting, what its sink stores."""
    def request_offsets(self, change_id: int, offsets: Mapping[PartitionKey, int],
                        onward: frozenset[PartitionKey] = frozenset(), supersedes: int | None = None) -> None:
        """Hand one call's offsets to the stream's offset gate (`onward`: those never moved back; `supersedes`:
        a change whose moves still waiting it ends, a revert's); their fate comes as on_change events."""
    def cancel_pending(self, timeout: float, up_to: int | None = None) -> list[GateEvent] | None:
        """Cancel the changes not persisted yet (of calls up to change id `up_to`); the cancelled ones, None if
        not confirmed in time."""
    def forget(self, change_id: int, tps: frozenset[PartitionKey]) -> None:
        """Another task of the stream persisted change `change_id` on `tps`: drop it (task_runner)."""
    def rss_bytes(self) -> int | None: ...
    def close(self) -> None:
        """Release what a stream that ended by itself still holds (its sink, its process)."""


@dataclass(frozen=True)
class RunRequest:
    """Everything an engine is given to run one stream."""
    config: StreamConfig
    pending: Callable[[], Mapping[PartitionKey, PendingMove]]   # the changes waiting now: a runner starts from them
    output: OutputPolicy                          # where its file sinks may write
    retry: RetryPolicy
    events: StreamEvents                          # what it reports, from any thread
    stop_timeout: float
    memory_limit_mb: int | None
    on_exit: Callable[[StreamRunner, str], None]  # its process died (cause): the registry's restart policy decides
    backoff: RestartBackoff                       # for an engine that restarts parts of itself (tasks)
    lock: AbstractContextManager                  # the registry's lock of the stream: such a restart runs under it
    host_stopping: Callable[[], bool]             # a stopping host restarts nothing
    marks: MarkKey | None = None                  # the stream's identity and mark key (change_marks), shared by its tasks


@runtime_checkable
class RecordsMeanwhile(Protocol):
    """A runner that takes a change before its record is durable (optional; the built-in ones do): handed with
    `recorded=False`, then told `recorded(change_id, ok)` once the state store's commit is done (ok) or failed.
    It persists nothing of such a change (no commit, nothing delivered from its targets) before it was told ok,
    and drops it, never applied, when told not ok. So its seek and fetch overlap the commit's fsync."""
    def request_offsets(self, change_id: int, offsets: Mapping[PartitionKey, int],
                        onward: frozenset[PartitionKey] = frozenset(), supersedes: int | None = None,
                        recorded: bool = True) -> None: ...
    def recorded(self, change_id: int, ok: bool) -> None: ...


@runtime_checkable
class CallsAnnounced(Protocol):
    """A runner told of an offset call before the host resolves its offsets (optional; the built-in ones are):
    `call_coming` before, `call_ended` once the call's request was handed over (or the call failed), after the
    request on the same ordered path. Meanwhile it delivers nothing from partitions newly assigned to it: the
    call may name them (stream/calls_coming.py). An announcement whose end never comes lapses `within` s later."""
    def call_coming(self, token: int, within: float) -> None: ...
    def call_ended(self, token: int) -> None: ...


Engine = Callable[[RunRequest], StreamRunner]
