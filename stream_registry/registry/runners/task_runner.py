"""`tasks: N`: one stream run as N member processes of its consumer group (Kafka Connect's tasks.max).

A task is today's stream process (or thread) with an index; this runner holds the N of them behind the
StreamRunner surface the registry already drives, so every registry call stays one lock-lookup-record step
and the worker knows nothing of tasks. The group protocol spreads the partitions over the tasks; the host
does not.

- Offset changes go to every task's gate: whichever task holds a partition (now, or after a rebalance moves
  it) applies the change, so one call stays one change id with one row per partition. When a task persists a
  change on a partition, the others are told at once to forget it there (Forget, handled off their poll
  thread), so the task that takes the partition over later does not move it again. The partition can reach
  another task only through a rebalance, which the applying task joins after it reported the change (its
  poll thread persists, reports, then polls again): the relay through the host normally lands first. A window
  remains when the host relays slower than a whole rebalance round.
- A cancel reaches every task; it is confirmed when every running task confirmed it.
- A task whose process dies is brought back by the stream's restart policy, alone, with the registry's
  backoff; meanwhile the group gives its partitions to the other tasks (once its session times out: a killed
  process cannot leave the group), which resume them from the group's commits (the sink's stored offsets on
  exactly-once), so no record is lost. The stream shows `error` naming the task until it runs again.
- The stream's status is the tasks' together: error if one is, starting while one starts, else running.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager

from ...config import StreamConfig
from ...errors import StreamError
from ...model import GateEvent, MoveState, PartitionKey, StreamStatus, WorkerSnapshot
from ..stream.batch_stats import BatchStats
from ..stream.stream_events import StreamEvents
from .announced_calls import AnnouncedCalls
from .engine import CallsAnnounced, RecordsMeanwhile, StreamRunner
from .restarts import RestartBackoff

log = logging.getLogger("mgstreams.registry")

# (the task's own events, what to call when its process dies) -> a runner of one task, not started
NewTask = Callable[[StreamEvents, Callable[[StreamRunner, str], None], int], StreamRunner]   # (events, on_exit, index)


class _Task:
    def __init__(self, index: int):
        self.index = index
        self.runner: StreamRunner | None = None
        self.status = StreamStatus.CREATED
        self.error: str | None = None
        self.stats = BatchStats()        # this run's batches
        self.earlier = BatchStats()      # the batches of its runs before (a restarted task counts from zero)
        self.started_at = 0.0
        self.failures = 0
        self.restarts = 0
        self.timer: threading.Timer | None = None


# the tasks' snapshots, asked at once; its own pool, never waited on by its own tasks (each is one pipe round trip)
_SNAPSHOTS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="mgstreams-task-snapshot")


class TaskRunner:
    """N tasks of one stream, as one StreamRunner (see the module docstring)."""

    def __init__(self, config: StreamConfig, *, events: StreamEvents, new_task: NewTask, backoff: RestartBackoff,
                 lock: AbstractContextManager, host_stopping: Callable[[], bool] = lambda: False):
        self.config = config
        self._events, self._new_task, self._backoff = events, new_task, backoff
        self._host_stopping = host_stopping   # a stopping host restarts no task
        self._stream_lock = lock           # the registry's lock of this stream: a task restarts under it
        self._lock = threading.Lock()      # the tasks' statuses and stats
        self._tell = threading.Lock()      # what the registry is told, in the order it was decided
        self._tasks = [_Task(index) for index in range(config.tasks)]
        self._stopping = False
        self._shown: tuple[StreamStatus, str | None] | None = None
        self._unrecorded: dict[int, list] = {}   # change id: (task, request) held until its record is durable
        self._announced = AnnouncedCalls()   # calls coming: a task made meanwhile is told of them (announced_calls)

    # -- StreamRunner -----------------------------------------------------------
    @property
    def pid(self) -> int | None:
        pids = self.pids
        return pids[0] if pids else None

    @property
    def pids(self) -> tuple[int, ...]:
        """One per running task, in task order."""
        return tuple(r.pid for r in self._runners() if r.pid is not None)

    def start(self, timeout: float = 30.0) -> None:
        """Start every task at once; if one fails, the others are stopped and its error raised."""
        for task in self._tasks:
            self._runner_of(task)
        failures: list[str] = []

        def start_one(task: _Task) -> None:
            task.started_at = time.monotonic()
            runner = task.runner
            try:
                if runner is not None:
                    runner.start(timeout)
            except StreamError as exc:
                failures.append(f"task {task.index}: {exc}")
        with ThreadPoolExecutor(max_workers=len(self._tasks), thread_name_prefix="mgstreams-task-start") as pool:
            list(pool.map(start_one, self._tasks))
        if failures:
            self._stopping = True
            self.close()
            raise StreamError("; ".join(sorted(failures)))

    def stop(self, timeout: float) -> str | None:
        """Stop every task at once (a host's stop takes one stop timeout); the notes of those that took force."""
        with self._lock:
            self._stopping = True
            for task in self._tasks:
                if task.timer is not None:
                    task.timer.cancel()
        notes: list[str] = []
        errors: list[str] = []

        def stop_one(task: _Task) -> None:
            if task.runner is None:
                return
            try:
                note = task.runner.stop(timeout)
            except StreamError as exc:
                errors.append(f"task {task.index}: {exc}")
                return
            if note:
                notes.append(f"task {task.index}: {note}")
        with ThreadPoolExecutor(max_workers=len(self._tasks), thread_name_prefix="mgstreams-task-stop") as pool:
            list(pool.map(stop_one, self._tasks))
        if errors:
            raise StreamError("; ".join(sorted(errors)))
        return "; ".join(sorted(notes)) or None

    @property
    def alive(self) -> bool:
        """While any task runs, or one waits for its restart."""
        return any(r.alive for r in self._runners()) or (
            not self._stopping and any(t.timer is not None for t in self._tasks))

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def restarts(self) -> int:
        """Tasks restarted by the restart policy since this runner started."""
        return sum(t.restarts for t in self._tasks)

    def snapshot(self) -> WorkerSnapshot:
        """The tasks' views together; `holders` says which task holds each partition."""
        assigned: set = set()
        positions: dict = {}
        pending: dict = {}
        stored: dict = {}
        holders: dict = {}
        running = [(t.index, t.runner) for t in self._tasks if t.runner is not None and t.runner.alive]
        if not running:
            return WorkerSnapshot()
        # asked at once: the others on kept threads (a pool made per call cost ~0.35 ms of an offset call's
        # resolve; bench/offset_latency.py --trace), the first in this thread
        others = [(index, _SNAPSHOTS.submit(runner.snapshot)) for index, runner in running[1:]]
        seens = [(running[0][0], running[0][1].snapshot())] + [(index, asked.result()) for index, asked in others]
        for index, seen in seens:
            assigned |= seen.assigned
            holders.update(dict.fromkeys(seen.assigned, index))
            positions.update({tp: o for tp, o in seen.positions.items() if tp in seen.assigned})
            pending.update(seen.pending)
            stored.update({tp: o for tp, o in seen.stored.items() if tp not in seen.assigned})
        for _, seen in seens:   # the task holding a partition knows its stored offset best (another's is older)
            stored.update({tp: o for tp, o in seen.stored.items() if tp in seen.assigned})
        return WorkerSnapshot(assigned=frozenset(assigned), positions=positions, pending=pending, stored=stored,
                              holders=holders)

    def request_offsets(self, change_id: int, offsets: Mapping[PartitionKey, int],
                        onward: frozenset[PartitionKey] = frozenset(), supersedes: int | None = None,
                        recorded: bool = True) -> None:
        """Every task's gate gets the call: the one that holds a partition, or is given it later, applies it."""
        for runner in self._runners():
            if isinstance(runner, RecordsMeanwhile):
                runner.request_offsets(change_id, offsets, onward, supersedes, recorded)
            elif recorded:
                runner.request_offsets(change_id, offsets, onward, supersedes)
            else:   # a task that cannot take it before its record is durable gets it once it is
                self._unrecorded.setdefault(change_id, []).append((runner, (change_id, offsets, onward, supersedes)))

    def recorded(self, change_id: int, ok: bool) -> None:
        for runner, args in self._unrecorded.pop(change_id, []):
            if ok:
                runner.request_offsets(*args)
        for runner in self._runners():
            if isinstance(runner, RecordsMeanwhile):
                runner.recorded(change_id, ok)

    def forget(self, change_id: int, tps: frozenset[PartitionKey]) -> None:
        for runner in self._runners():
            runner.forget(change_id, tps)

    def call_coming(self, token: int, within: float) -> None:
        """engine.CallsAnnounced: every task holds what it is newly assigned until the call ended, a task started
        meanwhile too."""
        with self._announced.lock:
            self._announced.coming(token, within)
            for runner in self._runners():
                if isinstance(runner, CallsAnnounced):
                    runner.call_coming(token, within)

    def call_ended(self, token: int) -> None:
        with self._announced.lock:
            self._announced.ended(token)
            for runner in self._runners():
                if isinstance(runner, CallsAnnounced):
                    runner.call_ended(token)

    def cancel_pending(self, timeout: float, up_to: int | None = None) -> list[GateEvent] | None:
        """Cancel in every task at once; None unless every running task confirmed in time."""
        runners = [r for r in self._runners() if r.alive]
        if not runners:
            return []
        with ThreadPoolExecutor(max_workers=len(runners), thread_name_prefix="mgstreams-task-cancel") as pool:
            answers = list(pool.map(lambda r: r.cancel_pending(timeout, up_to), runners))
        if any(a is None for a in answers):
            return None
        seen: dict[tuple, GateEvent] = {}
        for events in answers:
            for event in events or ():
                seen.setdefault((event.change_id, event.topic, event.partition), event)
        return list(seen.values())

    def rss_bytes(self) -> int | None:
        sizes = [size for size in (r.rss_bytes() for r in self._runners()) if size is not None]
        return sum(sizes) if sizes else None

    def close(self) -> None:
        with self._lock:
            self._stopping = True
            for task in self._tasks:
                if task.timer is not None:
                    task.timer.cancel()
        for runner in self._runners():
            runner.close()

    # -- one task's events ---------------------------------------------------------
    def _runner_of(self, task: _Task) -> StreamRunner:
        """`task`'s new runner, not started, told of the calls coming (and, being the task's, of their ends)."""
        events = StreamEvents(on_status=lambda status, error: self._on_status(task, status, error),
                              on_change=lambda event: self._on_change(task, event),
                              on_set_aside=self._events.on_set_aside,
                              on_stats=lambda stats: self._on_stats(task, stats),
                              on_realign=self._events.on_realign, on_lost=self._events.on_lost,
                              on_outage=self._events.on_outage)
        runner = self._new_task(events, lambda runner, cause: self._on_exit(task, runner, cause), task.index)
        with self._announced.lock:
            if isinstance(runner, CallsAnnounced):
                for token, within in self._announced.current().items():
                    runner.call_coming(token, within)
            task.runner = runner
        return runner

    def _on_change(self, task: _Task, event: GateEvent) -> None:
        """A persisted change is forgotten by the other tasks first (they must not move the partition again
        when it reaches them), then recorded."""
        if event.state == MoveState.PERSISTED:
            tps = frozenset({PartitionKey(event.topic, event.partition)})
            for other in self._tasks:
                runner = other.runner
                if other is not task and runner is not None:
                    runner.forget(event.change_id, tps)
        self._events.on_change(event)

    def _on_stats(self, task: _Task, stats: BatchStats) -> None:
        with self._tell:
            with self._lock:
                task.stats = stats
                total = BatchStats()
                for t in self._tasks:
                    total = total + t.earlier + t.stats
            self._events.on_stats(total)

    def _on_status(self, task: _Task, status: StreamStatus, error: str | None) -> None:
        with self._lock:
            task.status, task.error = status, error
        self._show()

    def _show(self) -> None:
        """The stream's status from its tasks' (told to the registry when it changes, in order: two tasks'
        pipe readers never tell it out of order)."""
        with self._tell:
            with self._lock:
                statuses = [t.status for t in self._tasks]
                errors = [f"task {t.index}: {t.error}" for t in self._tasks if t.error]
            if StreamStatus.ERROR in statuses:
                status = StreamStatus.ERROR
            elif StreamStatus.STARTING in statuses or StreamStatus.CREATED in statuses:
                status = StreamStatus.STARTING
            elif all(s == StreamStatus.STOPPED for s in statuses):
                status = StreamStatus.STOPPED
            else:
                status = StreamStatus.RUNNING
            shown = (status, "; ".join(errors) or None)
            if shown != self._shown:
                self._shown = shown
                self._events.on_status(*shown)

    def _on_exit(self, task: _Task, runner: StreamRunner, cause: str) -> None:
        """A task's process died (its pipe's reader thread): say so, and restart it alone if the policy says so."""
        with self._lock:
            if self._stopping or task.runner is not runner:
                return
            task.earlier, task.stats = task.earlier + task.stats, BatchStats()
            outcome = self._backoff.after_exit(cause, self.config.restart, failures=task.failures,
                                               ran_s=time.monotonic() - task.started_at, restarts=task.restarts,
                                               host_stopping=self._host_stopping())
            task.failures, error = outcome.failures, outcome.error
            if outcome.delay_s is not None:
                task.timer = threading.Timer(outcome.delay_s, self._restart, (task, runner))
                task.timer.daemon = True
                task.timer.start()
            task.status, task.error = StreamStatus.ERROR, error
        log.warning("stream %s: task %d: %s", self.config.name, task.index,
                    error.replace("stream process", f"stream process (pid {runner.pid})", 1))
        self._show()

    def _restart(self, task: _Task, crashed: StreamRunner) -> None:
        """The restart policy's start of one task, under the stream's lock (as the registry's restart is: no
        offset change is opened meanwhile), with the pending changes the host holds now."""
        with self._stream_lock:
            with self._lock:
                task.timer = None
                if self._stopping or task.runner is not crashed:
                    return
                task.restarts += 1
                runner = self._runner_of(task)
                task.started_at = time.monotonic()
                task.status, task.error = StreamStatus.STARTING, None
            try:
                runner.start()
            except StreamError as exc:
                log.warning("stream %s: task %d: restart failed: %s", self.config.name, task.index, exc)
                self._on_exit(task, runner, f"failed to start again ({exc})")
                return
            log.info("stream %s: task %d: restart %d (restart: %s): starting (pid %s)", self.config.name,
                     task.index, task.restarts, self.config.restart.value, runner.pid)
        self._show()

    def _runners(self) -> list[StreamRunner]:
        return [t.runner for t in self._tasks if t.runner is not None]
