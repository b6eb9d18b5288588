"""Where a running stream lives: on a thread of this process, or in a child process of its own.

The registry drives both through one surface (engine.StreamRunner), so every
guarantee of an offset change is implemented once, in the worker, whichever way
the stream runs. A stream host
runs each stream in its own process (stream_process): a crash stays inside its
stream, and streams do not share one GIL. Threads remain for embedding the
registry in one process, and for tests that watch an in-memory sink.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path

import psutil

from ...config import Delivery, StreamConfig
from ...errors import ConfigError, StreamError, StreamStateError
from ...graph.sinks.policy import OutputPolicy
from ...graph.sinks.protocol import Sink
from ...graph.sinks.schemes import open_sink
from ...graph.transform import load_transformation, locate_transformation
from ...model import GateEvent, PartitionKey, PendingMove, RetryPolicy, WorkerSnapshot
from ..stream.change_marks import MarkKey
from ..stream.stream_events import StreamEvents
from ..stream.worker import StreamWorker
from .announced_calls import AnnouncedCalls

log = logging.getLogger("mgstreams.registry")


class Isolation(StrEnum):
    THREAD = "thread"     # the registry's own process (embedding, tests)
    PROCESS = "process"   # one child process per running stream (the stream host)


class ThreadRunner:
    """A stream on a poll thread of this process: its transformation, its sink and its StreamWorker."""

    def __init__(self, config: StreamConfig, *, pending: Mapping[PartitionKey, PendingMove], output: OutputPolicy,
                 retry: RetryPolicy, events: StreamEvents, marks: MarkKey | None = None,
                 calls: Mapping[int, float] | None = None):
        """`calls`: offset calls announced before this runner was made (announced_calls.py)."""
        self.config = config
        self._marks = marks
        self._announced = AnnouncedCalls(calls)   # told to the worker once it exists
        self.pid: int | None = os.getpid()
        self._pending, self._output, self._retry, self._events = dict(pending), output, retry, events
        self._sink: Sink | None = None
        self._worker: StreamWorker | None = None

    @property
    def pids(self) -> tuple[int, ...]:
        return (os.getpid(),)

    @property
    def restarts(self) -> int:
        return 0

    def start(self, timeout: float = 30.0) -> None:
        transformation = load_stream_transformation(self.config)
        self._sink = open_sink(self.config.sink, self.config.sink_credentials(), self._output,
                               bolt_unwind=self.config.bolt_unwind, check_hosts=True)
        try:
            if self.config.delivery == Delivery.EXACTLY_ONCE and not hasattr(self._sink, "stored_offsets"):
                raise ConfigError(f"delivery: 'exactly_once' needs a sink that stores offsets with its batches "
                                  f"(bolt, cypherl, null), not {self.config.sink!r}")
            worker = StreamWorker(self.config, transformation, self._sink, pending=self._pending,
                                  events=self._events, retry=self._retry, marks=self._marks)
            with self._announced.lock:   # calls announced before it existed hold its first assignment too
                for token, within in self._announced.current().items():
                    worker.calls.coming(token, within)
                self._worker = worker
            worker.start(timeout)
        except BaseException:
            self.close()
            raise

    def stop(self, timeout: float) -> str | None:
        """A poll thread that does not stop in time keeps its sink: closing it under a write would be worse."""
        if self._worker is not None:
            self._worker.stop(timeout)
        self.close()
        return None

    @property
    def alive(self) -> bool:
        return self._worker is not None and self._worker.alive

    @property
    def stopping(self) -> bool:
        return self._worker is not None and self._worker.stopping

    def snapshot(self) -> WorkerSnapshot:
        return self._worker.snapshot() if self._worker is not None else WorkerSnapshot()

    def request_offsets(self, change_id: int, offsets: Mapping[PartitionKey, int],
                        onward: frozenset[PartitionKey] = frozenset(), supersedes: int | None = None,
                        recorded: bool = True) -> None:
        if self._worker is None:
            raise StreamStateError(f"name: stream {self.config.name!r} is not running")
        self._worker.request_offsets(change_id, offsets, onward, supersedes, recorded)

    def recorded(self, change_id: int, ok: bool) -> None:
        """engine.RecordsMeanwhile: the change's record is durable (ok), or was not written."""
        if self._worker is not None:
            self._worker.recorded(change_id, ok)

    def call_coming(self, token: int, within: float) -> None:
        """engine.CallsAnnounced: an offset call is being resolved (calls_coming.py)."""
        with self._announced.lock:
            self._announced.coming(token, within)
            if self._worker is not None:
                self._worker.calls.coming(token, within)

    def call_ended(self, token: int) -> None:
        with self._announced.lock:
            self._announced.ended(token)
            if self._worker is not None:
                self._worker.calls.ended(token)

    def cancel_pending(self, timeout: float, up_to: int | None = None) -> list[GateEvent] | None:
        return self._worker.cancel_pending(timeout, up_to) if self._worker is not None else []

    def forget(self, change_id: int, tps: frozenset[PartitionKey]) -> None:
        if self._worker is not None:
            self._worker.forget(change_id, tps)

    def rss_bytes(self) -> int | None:
        return process_rss(os.getpid())

    def close(self) -> None:
        sink, self._sink = self._sink, None
        if sink is not None:
            try:
                sink.close()
            except Exception as exc:  # a sink that fails to close must not block stop
                log.warning("stream %s: sink close failed: %s", self.config.name, exc)


def load_stream_transformation(config: StreamConfig):
    """The stream's transformation function, or ConfigError naming `transform`."""
    try:
        return load_transformation(config.transform, search_dirs=query_module_dirs(),
                                   options=config.transform_options)
    except StreamError as exc:
        raise ConfigError(_named_transform(str(exc))) from None


def _named_transform(text: str) -> str:
    return text if text.startswith("transform") else f"transform: {text}"


def check_stream_transformation(config: StreamConfig) -> None:
    """load_stream_transformation for its errors only (what a child process can send back)."""
    load_stream_transformation(config)


def locate_stream_transformation(config: StreamConfig) -> None:
    """The checks load_stream_transformation makes before importing anything (locate_transformation)."""
    try:
        locate_transformation(config.transform, search_dirs=query_module_dirs())
    except StreamError as exc:
        raise ConfigError(_named_transform(str(exc))) from None


def query_module_dirs() -> list[str]:
    """The bundled query modules directory; load_transformation adds MGSTREAMS_QUERY_MODULES_DIR itself."""
    bundled = Path(__file__).resolve().parents[3] / "query_modules"
    return [str(bundled)] if bundled.is_dir() else []


def process_rss(pid: int | None) -> int | None:
    """Resident memory of a process, None once it is gone."""
    if pid is None:
        return None
    try:
        return psutil.Process(pid).memory_info().rss
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
