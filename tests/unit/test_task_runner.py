"""The runner of a stream's N tasks (stream_registry/registry/runners/task_runner.py), over task runners that record
what they are asked: the status the stream shows, offset changes and cancels reaching every task, a persisted
change forgotten by the others, a dead task restarted alone. tests/host/test_stream_tasks.py runs real tasks."""
from __future__ import annotations

import threading
import time

import pytest

from stream_registry.config import StreamConfig
from stream_registry.errors import StreamError
from stream_registry.model import GateEvent, MoveState, PartitionKey, StreamStatus, WorkerSnapshot
from stream_registry.registry.runners.restarts import RestartBackoff
from stream_registry.registry.runners.task_runner import TaskRunner
from stream_registry.registry.stream.stream_events import StreamEvents

P0, P1 = PartitionKey("t", 0), PartitionKey("t", 1)


QUICK = RestartBackoff(first_s=0.05, max_s=0.2)   # the product's rule, in test time


class FakeTask:
    pids = iter(range(1000, 2000))

    def __init__(self, events: StreamEvents, on_exit, cancel_answer=()):
        self.events, self.on_exit = events, on_exit
        self.pid: int | None = None
        self.alive = False
        self.stopping = False
        self.requests: list = []
        self.forgotten: list = []
        self.assigned: frozenset = frozenset()
        self.stored: dict = {}
        self.cancel_answer = cancel_answer
        self.fail_start = False
        self.calls: list = []   # (what, token, whether it had started when told)

    def start(self, timeout: float = 30.0) -> None:
        if self.fail_start:
            raise StreamError("consumer did not start")
        self.pid, self.alive = next(self.pids), True
        self.events.on_status(StreamStatus.STARTING, None)

    def stop(self, timeout: float) -> str | None:
        self.alive = False
        self.events.on_status(StreamStatus.STOPPED, None)
        return None

    def snapshot(self) -> WorkerSnapshot:
        return WorkerSnapshot(assigned=self.assigned, positions={tp: 5 for tp in self.assigned},
                              stored=dict(self.stored))

    def request_offsets(self, change_id, offsets, onward=frozenset(), supersedes=None) -> None:
        self.requests.append((change_id, dict(offsets)))

    def forget(self, change_id, tps) -> None:
        self.forgotten.append((change_id, set(tps)))

    def cancel_pending(self, timeout, up_to=None):
        return None if self.cancel_answer is None else list(self.cancel_answer)

    def rss_bytes(self) -> int | None:
        return 100 if self.alive else None

    def close(self) -> None:
        self.alive = False

    def call_coming(self, token, within) -> None:
        self.calls.append(("coming", token, self.alive))

    def call_ended(self, token) -> None:
        self.calls.append(("ended", token, self.alive))

    def die(self, cause: str = "killed by signal 9 (SIGKILL)") -> None:
        self.alive = False
        self.on_exit(self, cause)


class Tasks:
    """A TaskRunner of `n` fake tasks; `made` holds every task it made, in order (restarts too)."""

    def __init__(self, n: int = 2, restart: str = "on-failure", host_stopping=lambda: False):
        self.statuses: list[tuple[StreamStatus, str | None]] = []
        self.changes: list[GateEvent] = []
        self.made: list[FakeTask] = []
        self.config = StreamConfig(name="s", topics=["t"], bootstrap_servers="localhost:9092", transform="m.f",
                                   sink="null://", tasks=n, restart=restart)
        self.runner = TaskRunner(self.config, events=StreamEvents(
            on_status=lambda status, error: self.statuses.append((status, error)),
            on_change=self.changes.append), new_task=self.new_task, backoff=QUICK, lock=threading.Lock(),
            host_stopping=host_stopping)

    def new_task(self, events, on_exit, index) -> FakeTask:
        task = FakeTask(events, on_exit)
        self.made.append(task)
        return task


def test_the_stream_runs_once_every_task_runs_and_shows_a_task_in_error_by_its_index():
    tasks = Tasks()
    tasks.runner.start()
    first, second = tasks.made
    assert tasks.statuses[-1] == (StreamStatus.STARTING, None)
    first.events.on_status(StreamStatus.RUNNING, None)
    assert tasks.statuses[-1] == (StreamStatus.STARTING, None), "one task still starts"
    second.events.on_status(StreamStatus.RUNNING, None)
    assert tasks.statuses[-1] == (StreamStatus.RUNNING, None)
    second.events.on_status(StreamStatus.ERROR, "sink refused the batch")
    assert tasks.statuses[-1] == (StreamStatus.ERROR, "task 1: sink refused the batch")
    assert tasks.runner.pids == (first.pid, second.pid) and tasks.runner.pid == first.pid
    assert tasks.runner.rss_bytes() == 200


def test_offset_changes_reach_every_task_and_a_persisted_one_is_forgotten_by_the_others_first():
    tasks = Tasks(3)
    tasks.runner.start()
    tasks.runner.request_offsets(7, {P0: 10, P1: 10})
    assert all(t.requests == [(7, {P0: 10, P1: 10})] for t in tasks.made)
    applied = GateEvent(change_id=7, topic="t", partition=1, offset=10, state=MoveState.PERSISTED, previous_offset=50)
    forgotten_when_recorded = []
    tasks.runner._events = StreamEvents(on_change=lambda e: forgotten_when_recorded.append(
        [list(t.forgotten) for t in tasks.made]))
    tasks.made[1].events.on_change(applied)
    assert forgotten_when_recorded == [[[(7, {P1})], [], [(7, {P1})]]], "the others forget it before it is recorded"
    waiting = GateEvent(change_id=7, topic="t", partition=0, offset=10, state=MoveState.WAITING, reason="busy")
    tasks.made[0].events.on_change(waiting)
    assert [t.forgotten for t in tasks.made] == [[(7, {P1})], [], [(7, {P1})]], "only a persisted change is"


def test_the_snapshot_says_which_task_holds_each_partition():
    tasks = Tasks()
    tasks.runner.start()
    tasks.made[0].assigned, tasks.made[1].assigned = frozenset({P1}), frozenset({P0})
    tasks.made[0].stored = {P0: 10, P1: 40}   # P0's 10: what task 0 stored before P0 moved to task 1
    tasks.made[1].stored = {P0: 30, P1: 20}   # P1's 20: what task 1 stored before P1 moved to task 0
    seen = tasks.runner.snapshot()
    assert seen.assigned == {P0, P1} and dict(seen.holders) == {P1: 0, P0: 1}
    assert dict(seen.positions) == {P0: 5, P1: 5}
    assert dict(seen.stored) == {P0: 30, P1: 40}, "each partition's stored offset as its holder knows it"


def test_a_cancel_is_confirmed_only_when_every_task_confirmed_it():
    tasks = Tasks()
    tasks.runner.start()
    event = GateEvent(change_id=3, topic="t", partition=0, offset=1, state=MoveState.CANCELLED)
    tasks.made[0].cancel_answer, tasks.made[1].cancel_answer = [event], [event]
    assert tasks.runner.cancel_pending(1.0) == [event], "one change of a partition, however many tasks held it"
    tasks.made[1].cancel_answer = None
    assert tasks.runner.cancel_pending(1.0) is None


def test_a_dead_task_is_restarted_alone_and_the_stream_runs_again():
    tasks = Tasks()
    tasks.runner.start()
    for task in tasks.made:
        task.events.on_status(StreamStatus.RUNNING, None)
    survivor, victim = tasks.made
    victim.die()
    status, error = tasks.statuses[-1]
    assert status == StreamStatus.ERROR and error.startswith("task 1: stream process killed by signal 9 (SIGKILL); "
                                                             "restarting in 0.05 s (restart 1)")
    assert tasks.runner.alive, "the other task runs on"
    deadline = time.monotonic() + 5
    while len(tasks.made) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    restarted = tasks.made[2]
    assert restarted.alive and survivor.alive and tasks.runner.pids == (survivor.pid, restarted.pid)
    assert tasks.runner.restarts == 1
    restarted.events.on_status(StreamStatus.RUNNING, None)
    assert tasks.statuses[-1] == (StreamStatus.RUNNING, None)
    tasks.runner.request_offsets(9, {P0: 1})
    assert restarted.requests == [(9, {P0: 1})] and victim.requests == []


def test_restart_never_leaves_a_dead_task_down_and_a_stop_cancels_a_coming_restart():
    tasks = Tasks(restart="never")
    tasks.runner.start()
    tasks.made[1].die("exited with 3")
    assert tasks.statuses[-1] == (StreamStatus.ERROR, "task 1: stream process exited with 3; not restarted "
                                                      "(restart: never)")
    time.sleep(0.2)
    assert len(tasks.made) == 2

    tasks = Tasks()
    tasks.runner.start()
    tasks.made[0].die()
    tasks.runner.stop(1.0)
    time.sleep(0.2)
    assert len(tasks.made) == 2 and not tasks.runner.alive


def test_a_stopping_host_restarts_no_task():
    """SIGTERM reaches the host's process group: the tasks die before the host stops the stream (issue 33)."""
    tasks = Tasks(host_stopping=lambda: True)
    tasks.runner.start()
    tasks.made[0].die("killed by signal 15 (SIGTERM)")
    assert tasks.statuses[-1] == (StreamStatus.ERROR, "task 0: stream process killed by signal 15 (SIGTERM); not "
                                                      "restarted: the host is stopping")
    time.sleep(0.3)
    assert len(tasks.made) == 2


def test_a_task_that_fails_to_start_stops_the_others_and_names_its_index():
    tasks = Tasks()
    original = tasks.new_task

    def failing_second(events, on_exit, index):
        task = original(events, on_exit, index)
        task.fail_start = len(tasks.made) == 2
        return task
    tasks.runner._new_task = failing_second
    with pytest.raises(StreamError, match=r"^task 1: consumer did not start$"):
        tasks.runner.start()
    assert not any(t.alive for t in tasks.made)


def test_a_task_started_while_a_call_is_coming_is_told_before_it_starts_and_of_the_end_after():
    """A task restarted (or the stream started) while the host resolves an offset call holds its first assignment
    for that call too (calls_coming.py): it is told of the call before it starts, and of its end."""
    tasks = Tasks()
    tasks.runner.call_coming(1, 30.0)   # announced before the stream's tasks exist
    tasks.runner.start()
    assert [t.calls for t in tasks.made] == [[("coming", 1, False)]] * 2, "told before each task started"
    tasks.runner.call_ended(1)
    tasks.runner.call_coming(2, 30.0)
    tasks.made[1].die()
    deadline = time.monotonic() + 5
    while len(tasks.made) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    restarted = tasks.made[2]
    deadline = time.monotonic() + 5
    while not restarted.alive and time.monotonic() < deadline:
        time.sleep(0.01)
    assert restarted.calls == [("coming", 2, False)], "only the call still coming, before its start"
    tasks.runner.call_ended(2)
    assert restarted.calls[-1] == ("ended", 2, True)
    tasks.made[0].die()
    deadline = time.monotonic() + 5
    while len(tasks.made) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert tasks.made[3].calls == [], "no call coming: nothing told"
