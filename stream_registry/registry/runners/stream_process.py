"""A stream in a child process of its own, driven over a pipe.

Why a process: a segfault in librdkafka or in a transformation's C extension,
or the OOM killer, then ends one stream, not the host; and streams stop sharing
one GIL (pymgclient holds it for a whole Bolt write). The child runs the same
ThreadRunner an embedded registry runs; the host keeps the registry, the state
store and the API. Only the host writes the state store: the child reports
status changes and applied offsets, and answers snapshot and offset requests.

Children are spawned, not forked: the host has threads (uvicorn, librdkafka)
that a fork would copy mid-flight. A child never outlives its host: when the
pipe closes (the host died, even by SIGKILL) it stops its consumer cleanly,
within its stop timeout, then exits. Ctrl-C at the host's terminal reaches
the whole process group; children ignore it and wait for the host's stop.

The pipe speaks typed messages (the frozen dataclasses below), each side
dispatching on the message's type in one table. Offset changes are not
questions: the host hands them over (SetOffsets) and learns their fate from the
gate's events (OffsetEvents), which the host records in its state store, the
one truth of a pending change. Spawning, watching the host and carrying errors
back are child_process's, shared with one-shot calls.

Why one module of about 400 lines: the pipe's messages and the two sides that
speak them (the host's ProcessRunner, the child's loop) change together.
"""
from __future__ import annotations

import itertools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from ...config import StreamConfig
from ...crash_stacks import print_stacks_on_crash
from ...errors import StreamError
from ...graph.sinks.policy import OutputPolicy
from ...kafka.garbage import collect_on_own_thread
from ...log_lines import one_line_logging
from ...log_repeats import collapse_all_repeats
from ...model import (
    STOP_TIMEOUT_S,
    GateEvent,
    PartitionKey,
    PendingMove,
    Realignment,
    RecordsLost,
    RetryPolicy,
    SetAside,
    StreamStatus,
    WorkerSnapshot,
)
from ...sandbox import confine_stream, end_group
from ..stream.batch_stats import BatchStats
from ..stream.change_marks import MarkKey
from ..stream.stream_events import StreamEvents
from .announced_calls import AnnouncedCalls
from .caps import MemoryWatch
from .child_process import CHILD_POLL_S, child_error, exit_cause, spawn_child, watch_host
from .runner import ThreadRunner, process_rss

log = logging.getLogger("mgstreams.registry")
STOP_GRACE_S = 5.0        # beyond the stop timeout, for closing the consumer and the sink
REPLY_GRACE_S = 2.0       # beyond an offset request's own timeout
REALIGN_RECORD_WAIT_S = 10.0   # a realignment's record in the host's history, waited for before writing on
SNAPSHOT_TIMEOUT_S = 5.0  # a child busy in a long GIL-holding write answers late: use its last answer
EXIT_STOP_TIMED_OUT = 75  # a child whose batch did not finish within the stop timeout leaves with this
EXIT_OVER_MEMORY = 76     # a child over its memory cap leaves with this, its stream in error saying so


@dataclass(frozen=True)
class ChildSpec:
    """Everything a child needs to run its stream (sent through the spawn pipe, never on a command line)."""
    config: StreamConfig
    pending: Mapping[PartitionKey, PendingMove]
    output: OutputPolicy
    retry: RetryPolicy
    stop_timeout: float
    log_level: int
    memory_limit_mb: int | None = None   # resident memory over this ends the stream in error (caps.MemoryWatch)
    marks: MarkKey | None = None         # the stream's identity and mark key (change_marks): never on a command line
    calls: Mapping[int, float] = field(default_factory=dict)   # offset calls coming at its start (announced_calls)


# -- host to child -------------------------------------------------------------------
@dataclass(frozen=True)
class StopStream:
    timeout: float


@dataclass(frozen=True)
class SnapshotRequest:
    request_id: int


@dataclass(frozen=True)
class SetOffsets:
    change_id: int
    offsets: Mapping[PartitionKey, int]
    onward: frozenset[PartitionKey] = frozenset()   # those never moved back (ResolvedOffset.onward)
    supersedes: int | None = None   # a revert's: the change whose moves still waiting it ends
    recorded: bool = True           # False: its record's commit is under way; a Recorded follows (RecordsMeanwhile)


@dataclass(frozen=True)
class Recorded:
    """The record of a change handed with recorded=False is durable (ok), or was not written (never apply it)."""
    change_id: int
    ok: bool


@dataclass(frozen=True)
class Forget:
    """Another task of the stream persisted this change on these partitions (task_runner)."""
    change_id: int
    tps: frozenset[PartitionKey]


@dataclass(frozen=True)
class CallComing:
    """An offset call is being resolved in the host: hold newly assigned partitions (calls_coming.py)."""
    token: int
    within: float


@dataclass(frozen=True)
class CallEnded:
    """That call ended (its request, if any, went before this on the same pipe)."""
    token: int


@dataclass(frozen=True)
class RealignRecorded:
    """The host recorded the realignments of that Realigned in the history (or failed to, and logged it)."""
    request_id: int


@dataclass(frozen=True)
class CancelRequest:
    request_id: int
    timeout: float
    up_to: int | None


# -- child to host -------------------------------------------------------------------
@dataclass(frozen=True)
class Started:
    pid: int


@dataclass(frozen=True)
class StartFailed:
    reason: str


@dataclass(frozen=True)
class StatusChanged:
    status: StreamStatus
    error: str | None


@dataclass(frozen=True)
class OffsetEvents:
    """The gate's events in order; the partitions of one persist (`more` on all but the last) in one message."""
    events: tuple[GateEvent, ...]


@dataclass(frozen=True)
class SetAsideRecords:
    records: list[SetAside]


@dataclass(frozen=True)
class Realigned:
    moves: list[Realignment]
    request_id: int | None = None   # the child waits for RealignRecorded before it writes on (_RealignRelay)


@dataclass(frozen=True)
class StatsReport:
    stats: BatchStats


@dataclass(frozen=True)
class LostReport:
    lost: RecordsLost


@dataclass(frozen=True)
class OutageReport:
    since: datetime | None


@dataclass(frozen=True)
class Reply:
    request_id: int
    value: Any


@dataclass(frozen=True)
class Ended:
    cause: str | None   # None: the stream ended by itself (its status says why); else why the process leaves


class ProcessRunner:
    """The host's handle on one stream process (see the module docstring)."""

    def __init__(self, config: StreamConfig, *, pending: Mapping[PartitionKey, PendingMove], output: OutputPolicy,
                 retry: RetryPolicy, events: StreamEvents,
                 on_exit: Callable[[ProcessRunner, str], None], stop_timeout: float = STOP_TIMEOUT_S,
                 memory_limit_mb: int | None = None, marks: MarkKey | None = None):
        self.config = config
        self.pid: int | None = None
        self._spec = ChildSpec(config, dict(pending), output, retry, stop_timeout,
                               logging.getLogger().getEffectiveLevel(), memory_limit_mb, marks)
        self._events, self._on_exit = events, on_exit
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._ended: Ended | None = None
        self._send_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._waiting: dict[int, _Reply] = {}
        self._started = threading.Event()
        self._start_error: str | None = None
        self._stop_requested = False
        self._running = False          # started, and neither ended nor exited since
        self._last_snapshot = WorkerSnapshot()
        self._reader: threading.Thread | None = None   # the only thread that reaps the process
        self._exitcode: int | None = None
        self._announced = AnnouncedCalls()   # the calls coming at its spawn go in its spec, later ones on the pipe

    @property
    def pids(self) -> tuple[int, ...]:
        return (self.pid,) if self.pid is not None else ()

    @property
    def restarts(self) -> int:
        return 0   # the registry restarts a stream whose process died

    # -- control --------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> None:
        with self._announced.lock:   # a call announced or ended meanwhile goes on the pipe, after the spec's
            spec = replace(self._spec, calls=self._announced.current())
            process, conn = spawn_child(child_main, (spec,), f"mgstreams-stream-{self.config.name}")
            self._process, self._conn, self.pid = process, conn, process.pid
        self._reader = reader = threading.Thread(target=self._read, args=(process, conn),
                                                 name=f"mgstreams-pipe-{self.config.name}", daemon=True)
        reader.start()
        if not self._started.wait(timeout):
            self.close()
            raise StreamError(f"stream {self.config.name!r}: its process did not start within {timeout:g} s")
        if self._start_error is not None:
            reader.join(STOP_GRACE_S)
            raise StreamError(self._start_error)

    def stop(self, timeout: float) -> str | None:
        self._stop_requested = True
        reader = self._reader
        if reader is None or not reader.is_alive():   # never started, died or ended by itself: its status says why
            return None
        self._send(StopStream(timeout))
        reader.join(timeout + STOP_GRACE_S)
        if reader.is_alive() or self._exitcode == EXIT_STOP_TIMED_OUT:
            self.close()
            return (f"its process did not stop within {timeout:g} s and was killed; its last batch was not "
                    f"committed and is read again at the next start")
        if self._exitcode != 0:
            return f"its process {exit_cause(self._exitcode)} while stopping"
        return None

    @property
    def alive(self) -> bool:
        return self._running

    @property
    def stopping(self) -> bool:
        return self._stop_requested

    def snapshot(self):
        if self._stop_requested:   # a stopping child finishes its batch before it answers: use its last answer
            return self._last_snapshot
        answer = self._ask(SnapshotRequest, (), SNAPSHOT_TIMEOUT_S)
        if answer is not None:
            self._last_snapshot = answer
        return self._last_snapshot

    def request_offsets(self, change_id, offsets, onward=frozenset(), supersedes=None, recorded=True):
        if self._running:
            self._send(SetOffsets(change_id, dict(offsets), frozenset(onward), supersedes, recorded))

    def recorded(self, change_id: int, ok: bool) -> None:
        """After request_offsets(recorded=False), on the same ordered pipe (engine.RecordsMeanwhile)."""
        if self._running:
            self._send(Recorded(change_id, ok))

    def call_coming(self, token: int, within: float) -> None:
        """engine.CallsAnnounced; sent even while the process starts (the pipe keeps it); before it is spawned,
        kept for its spec."""
        with self._announced.lock:
            self._announced.coming(token, within)
            self._send(CallComing(token, within))

    def call_ended(self, token: int) -> None:
        """After the call's request, on the same ordered pipe."""
        with self._announced.lock:
            self._announced.ended(token)
            self._send(CallEnded(token))

    def cancel_pending(self, timeout, up_to=None):
        """The child's answer comes after any change it persisted before the cancel (one ordered pipe)."""
        return self._ask(CancelRequest, (timeout, up_to), timeout + REPLY_GRACE_S)

    def forget(self, change_id: int, tps: frozenset[PartitionKey]) -> None:
        """Sent even while the process starts: the pipe keeps it until the child serves it, as it starts."""
        self._send(Forget(change_id, frozenset(tps)))

    def rss_bytes(self) -> int | None:
        return process_rss(self.pid) if self._running else None

    def close(self) -> None:
        """Kill the process if it still runs, and wait until its reader has reaped it."""
        reader, process = self._reader, self._process
        if reader is None or process is None or reader is threading.current_thread():
            return
        if reader.is_alive():
            try:
                process.kill()
            except OSError:
                pass
        reader.join(STOP_GRACE_S)

    # -- the pipe ---------------------------------------------------------------
    def _send(self, message: object) -> bool:
        if self._conn is None:
            return False
        try:
            with self._send_lock:
                self._conn.send(message)
            return True
        except (OSError, ValueError):   # the child is gone; its reader reports how
            return False

    def _ask(self, kind: type, args: tuple, timeout: float) -> Any:
        """Send a request and wait for its reply; None when the process is gone or too slow."""
        if not self._running:
            return None
        request_id = next(self._ids)
        reply = self._waiting[request_id] = _Reply()
        try:
            if not self._send(kind(request_id, *args)):
                return None
            reply.done.wait(timeout)
            return reply.value
        finally:
            self._waiting.pop(request_id, None)

    def _read(self, process: BaseProcess, conn: Connection) -> None:
        """Dispatch what the child says, in order; when the pipe closes, find out why."""
        self._ended = None
        handlers: dict[type, Callable[[Any], None]] = {StatusChanged: lambda m: self._events.on_status(m.status, m.error),
                    OffsetEvents: self._on_offset_events,
                    SetAsideRecords: lambda m: self._events.on_set_aside(m.records),
                    StatsReport: lambda m: self._events.on_stats(m.stats),
                    Realigned: self._on_realigned,
                    LostReport: lambda m: self._events.on_lost(m.lost),
                    OutageReport: lambda m: self._events.on_outage(m.since),
                    Reply: self._on_reply, Started: self._on_started, StartFailed: self._on_start_failed,
                    Ended: self._on_ended}
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                break
            handlers[type(message)](message)
        ended = self._ended
        self._running = False
        for reply in list(self._waiting.values()):
            reply.done.set()
        end_group(process.pid)       # its pipe closed: once it has exited, what its transformation started goes
        process.join(STOP_GRACE_S)
        self._exitcode = _reaped_exitcode(process)
        conn.close()
        if not self._started.is_set():
            self._start_error = f"stream {self.config.name!r}: its process {exit_cause(self._exitcode)} " \
                                f"while starting"
            self._started.set()
            return
        if self._stop_requested or self._start_error is not None:
            return
        cause = ended.cause if ended is not None else exit_cause(self._exitcode)
        if ended is not None and cause is None:
            return  # the stream ended by itself (an error it reported); its process left cleanly
        self._on_exit(self, cause)   # the registry logs it, with what its restart policy does

    def _on_offset_events(self, message: OffsetEvents) -> None:
        for event in message.events:
            self._events.on_change(event)

    def _on_realigned(self, message: Realigned) -> None:
        """Recorded (durable) before the child is told: it writes no record from there until then."""
        try:
            self._events.on_realign(message.moves)
        finally:
            if message.request_id is not None:
                self._send(RealignRecorded(message.request_id))

    def _on_reply(self, message: Reply) -> None:
        reply = self._waiting.get(message.request_id)
        if reply is not None:
            reply.value = message.value
            reply.done.set()

    def _on_started(self, message: Started) -> None:
        self._running = True
        self._started.set()

    def _on_start_failed(self, message: StartFailed) -> None:
        self._start_error = message.reason
        self._started.set()

    def _on_ended(self, message: Ended) -> None:
        self._ended = message
        self._running = False


def _reaped_exitcode(process: BaseProcess) -> int | None:
    """The exit status. Process.start() of another stream reaps finished children too (multiprocessing's
    _cleanup, from the starting thread): if it won the race, the status lands on our Popen a moment later."""
    for _ in range(100):
        if process.exitcode is not None:
            return process.exitcode
        time.sleep(0.01)
    return None



class _Reply:
    def __init__(self):
        self.done = threading.Event()
        self.value: Any = None


# -- the child ----------------------------------------------------------------------
def child_main(conn, spec: ChildSpec) -> None:
    """Run one stream until the host says stop, the stream ends by itself, or the host is gone."""
    name = spec.config.name
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the host stops us in order
    terminated = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: terminated.set())
    confine_stream(spec.config.sink, spec.output, spec.memory_limit_mb)   # before any of the stream's code loads
    one_line_logging(spec.log_level,
                     f"%(asctime)s %(levelname)s %(name)s [stream {name}, pid %(process)d]: %(message)s")
    collapse_all_repeats()   # an outage's reconnect failures: one line per kind and interval, with a count
    collect_on_own_thread()   # never on a librdkafka thread: a client freed there aborts the process (kafka/garbage)
    print_stacks_on_crash()
    send_lock = threading.Lock()

    def send(message) -> None:
        try:
            with send_lock:
                conn.send(message)
        except (OSError, ValueError):
            pass   # the host is gone: the loop below notices and stops

    realigns = _RealignRelay(send)
    runner = ThreadRunner(spec.config, pending=spec.pending, output=spec.output, retry=spec.retry, marks=spec.marks,
                          calls=spec.calls,
                          events=StreamEvents(on_status=lambda status, error: send(StatusChanged(status, error)),
                                              on_change=_EventRelay(send),
                                              on_set_aside=lambda records: send(SetAsideRecords(records)),
                                              on_stats=lambda stats: send(StatsReport(stats)),
                                              on_realign=realigns,
                                              on_lost=lambda lost: send(LostReport(lost)),
                                              on_outage=lambda since: send(OutageReport(since))))
    try:
        runner.start()
    except BaseException as exc:  # ours, or a transformation module that fails oddly at import
        send(StartFailed(child_error(exc, spec.config.secret_values()).message))
        return
    send(Started(os.getpid()))
    if spec.memory_limit_mb is not None:
        MemoryWatch(spec.memory_limit_mb, lambda message: _over_memory(name, message, send)).start()
    host_gone = threading.Event()
    watch_host(host_gone.set)
    why = _serve(conn, runner, send, terminated, host_gone, realigns)
    if why == "stop":
        return
    if why is None:
        runner.close()
        send(Ended(None))
        return
    _exit_within(spec.stop_timeout + STOP_GRACE_S)
    log.warning("stream %s: %s; stopping", name, why)
    try:
        runner.stop(spec.stop_timeout)
    except StreamError as exc:
        log.error("stream %s: %s", name, exc)
        os._exit(EXIT_STOP_TIMED_OUT)
    send(Ended(why))


class _EventRelay:
    """The gate's events to the host, a persist's partitions together: one pipe message, not one each."""

    def __init__(self, send: Callable[[object], None]):
        self._send = send
        self._held: list[GateEvent] = []

    def __call__(self, event: GateEvent) -> None:
        self._held.append(event)
        if not event.more:
            events, self._held = tuple(self._held), []
            self._send(OffsetEvents(events))


class _RealignRelay:
    """A realignment (the sink resumed a partition elsewhere than the group's commit, or moved it under the
    stream) goes to the host, and the poll thread waits until the host recorded it in the history (at most
    REALIGN_RECORD_WAIT_S) before it writes a record from there: a kill right after that batch must not leave the
    history without the move (a restart then sees the sink and the group agree, and nothing tells of it)."""

    def __init__(self, send: Callable[[object], None]):
        self._send = send
        self._ids = itertools.count(1)
        self._waiting: dict[int, threading.Event] = {}

    def __call__(self, moves: list[Realignment]) -> None:
        request_id = next(self._ids)
        recorded = self._waiting[request_id] = threading.Event()
        try:
            self._send(Realigned(moves, request_id))
            if not recorded.wait(REALIGN_RECORD_WAIT_S):
                log.warning("the host did not say within %g s that it recorded the realignment; going on",
                            REALIGN_RECORD_WAIT_S)
        finally:
            self._waiting.pop(request_id, None)

    def recorded(self, message: RealignRecorded) -> None:
        event = self._waiting.get(message.request_id)
        if event is not None:
            event.set()


def _over_memory(name: str, message: str, send) -> None:
    """Over the memory cap: the stream ends in error saying so (not restarted: it would grow again), and the
    process leaves at once; its batch is not committed and is read again at the next start."""
    log.error("stream %s: error: %s", name, message)
    send(StatusChanged(StreamStatus.ERROR, message))
    send(Ended(None))
    os._exit(EXIT_OVER_MEMORY)


def _serve(conn, runner: ThreadRunner, send, terminated: threading.Event, host_gone: threading.Event,
           realigns: _RealignRelay) -> str | None:
    """Answer the host until told to stop ("stop"), the stream ends (None) or we must leave (why)."""
    handlers = {**_child_handlers(runner, send), RealignRecorded: realigns.recorded}
    while runner.alive:
        if terminated.is_set():
            return "stopped by SIGTERM"
        try:
            if not conn.poll(CHILD_POLL_S):
                if host_gone.is_set():
                    return "its host is gone"
                continue
            message = conn.recv()
        except (EOFError, OSError):
            return "its host is gone"
        if isinstance(message, StopStream):
            _exit_within(message.timeout + STOP_GRACE_S)
            try:
                runner.stop(message.timeout)
            except StreamError as exc:
                log.error("stream %s: %s", runner.config.name, exc)
                os._exit(EXIT_STOP_TIMED_OUT)
            return "stop"
        handlers[type(message)](message)
    return None


def _child_handlers(runner: ThreadRunner, send) -> dict:
    """What the child does with each request but stop (which ends _serve)."""
    def cancel(message: CancelRequest) -> None:   # waits for the poll thread: on a thread of its own
        def answer() -> None:
            send(Reply(message.request_id, runner.cancel_pending(message.timeout, message.up_to)))
        threading.Thread(target=answer, daemon=True).start()
    return {SnapshotRequest: lambda m: send(Reply(m.request_id, runner.snapshot())),
            SetOffsets: lambda m: runner.request_offsets(m.change_id, m.offsets, m.onward, m.supersedes,
                                                         m.recorded),
            Recorded: lambda m: runner.recorded(m.change_id, m.ok),
            Forget: lambda m: runner.forget(m.change_id, m.tps),
            CallComing: lambda m: runner.call_coming(m.token, m.within),
            CallEnded: lambda m: runner.call_ended(m.token),
            CancelRequest: cancel}


def _exit_within(seconds: float) -> None:
    """A stop that hangs (a write that never returns) must not keep the process: exit hard after `seconds`."""
    timer = threading.Timer(seconds, lambda: os._exit(EXIT_STOP_TIMED_OUT))
    timer.daemon = True
    timer.start()
