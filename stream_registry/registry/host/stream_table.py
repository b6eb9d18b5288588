"""The registry's streams by name, each with its lock: the one lookup every call starts with.

Calls on one stream are serialized by its lock, taken in the same step as the
lookup (`locked`), so a dropped stream is never acted on again; nothing waits
while holding it. A call that must ask the cluster reads what it needs under the
lock (`view`) and asks with no lock held.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

from ...config import StreamConfig
from ...errors import ConfigError, StreamNotFound, StreamStateError
from ...kafka.queries import PartitionQuery
from ...model import StreamStatus
from ..runners.engine import StreamRunner
from ..stream.batch_stats import BatchStats


@dataclass
class StreamEntry:
    """One stream as the registry holds it (changed under its lock)."""
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

    @property
    def running(self) -> StreamRunner | None:
        """Its runner, while it is alive."""
        return self.runner if self.runner is not None and self.runner.alive else None


class StreamTable:
    """name -> StreamEntry, with the registry's lock and its closing state. `open_query` connects a stream's
    cluster queries; `check` applies today's allowlists to a stored config before anything connects for it."""

    def __init__(self, open_query: Callable[[StreamConfig], PartitionQuery],
                 check: Callable[[StreamConfig], None]):
        self._open_query, self._check = open_query, check
        self.lock = threading.Lock()
        self.streams: dict[str, StreamEntry] = {}
        self.closed = False
        self.closing = False   # set once the host stops: no stream is restarted any more

    def entry(self, name: str) -> StreamEntry:
        if not isinstance(name, str):
            raise ConfigError(f"name: expected a stream name, got {type(name).__name__} {name!r}")
        with self.lock:
            if self.closed:
                raise StreamStateError("registry: closed")
            stream = self.streams.get(name)
        if stream is None:
            raise StreamNotFound(f"name: no stream named {name!r}")
        return stream

    @contextmanager
    def locked(self, name: str) -> Iterator[StreamEntry]:
        """Look the stream up and take its lock in one step: a stream dropped meanwhile is not found."""
        stream = self.entry(name)
        with stream.lock:
            if stream.dropped:
                raise StreamNotFound(f"name: no stream named {name!r}")
            yield stream

    def view(self, name: str) -> tuple[StreamEntry, StreamRunner | None, StreamConfig, PartitionQuery]:
        """What a call needs to ask the cluster with no lock held: the stream, its runner, config and query,
        read together under its lock."""
        with self.locked(name) as stream:
            return stream, stream.running, stream.config, self.query(stream)

    def query(self, stream: StreamEntry) -> PartitionQuery:
        if stream.query is None:
            # A stored stream read back: today's allowlists (its hosts, its group) apply before anything
            # connects on its behalf, as they do at start.
            self._check(stream.config)
            stream.query = self._open_query(stream.config)
        return stream.query

    def live(self, stream: StreamEntry) -> bool:
        """Whether the stream runs, or restarts to run again (an alter), in a registry that is not stopping."""
        return not (self.closing or stream.dropped) and (stream.restarting is not None
                                                        or stream.running is not None)

    def stopping(self) -> bool:
        return self.closing or self.closed

    def all(self) -> list[StreamEntry]:
        with self.lock:
            return list(self.streams.values())
