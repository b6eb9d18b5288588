"""Running streams (stream_registry/registry/host/lifecycle.py) over a real state store and an engine stand-in
(runners/engine.py's seam), no Kafka: a start makes one runner from the engine and records the stream starting
and wanted running; what the runner reports is the stream's status; a process that dies is `error` naming the
cause and is started again by its restart policy after the backoff; a stop ends that and keeps it stopped."""
from __future__ import annotations

import threading

import pytest
from stream_helpers import wait_until

from stream_registry.config import RestartPolicy, StreamConfig
from stream_registry.errors import StreamStateError
from stream_registry.graph.sinks.policy import OutputPolicy
from stream_registry.group_policy import GroupPolicy
from stream_registry.model import DEFAULT_RETRY, StreamCaps, StreamStatus
from stream_registry.registry.host.lifecycle import Lifecycle
from stream_registry.registry.host.stream_table import StreamEntry, StreamTable
from stream_registry.registry.runners.engine import RunRequest
from stream_registry.registry.runners.engines import Engines
from stream_registry.registry.runners.restarts import RestartBackoff
from stream_registry.registry.runners.runner import Isolation
from stream_registry.registry.state.change_sets import ChangeSets
from stream_registry.registry.state.state_store import StateStore


class Runner:
    """A StreamRunner that runs nothing: the test plays its events and its exit."""

    def __init__(self, request: RunRequest):
        self.request, self.alive, self.stopping, self.stopped = request, False, False, threading.Event()
        self.pid, self.pids, self.restarts = 4242, (4242,), 0

    def start(self, timeout: float = 30.0) -> None:
        self.alive = True

    def stop(self, timeout: float) -> str | None:
        self.alive, self.stopping = False, True
        self.stopped.set()
        return None

    def die(self, cause: str) -> None:
        self.alive = False
        self.request.on_exit(self, cause)

    def close(self) -> None:
        pass


@pytest.fixture
def lifecycle(tmp_path):
    store = StateStore(tmp_path)
    runners: list[Runner] = []
    table = StreamTable(open_query=lambda config: None, check=lambda config: None)
    engines = Engines(Isolation.THREAD, {"standin": lambda request: runners.append(Runner(request)) or runners[-1]},
                      engine_of=lambda config: "standin")
    lifecycle = Lifecycle(table, store, ChangeSets(store), engines, group_policy=GroupPolicy(), caps=StreamCaps(),
                          backoff=RestartBackoff(first_s=0.05, max_s=0.1), stop_timeout=1.0, retry=DEFAULT_RETRY,
                          processes=False, output=lambda: OutputPolicy(()))
    config = StreamConfig("orders", ["t"], "localhost:9092", "stream_helpers.offsets_transform", "null://",
                          restart=RestartPolicy.ON_FAILURE)
    store.insert_stream(config)
    table.streams["orders"] = StreamEntry(config, StreamStatus.CREATED)
    yield lifecycle, table.streams["orders"], runners, store
    lifecycle.close_all(table.all())
    store.close()


def stored(store: StateStore) -> tuple[bool, StreamStatus, str | None]:
    [(_, desired, status, error)] = store.load_streams()
    return desired, status, error


def test_a_start_makes_one_runner_and_what_it_reports_is_the_streams_status(lifecycle):
    lifecycle, stream, runners, store = lifecycle
    lifecycle.start("orders")
    assert len(runners) == 1 and stream.runner is runners[0] and stored(store) == (True, StreamStatus.STARTING, None)
    runners[0].request.events.on_status(StreamStatus.RUNNING, None)
    assert stream.status is StreamStatus.RUNNING and stored(store)[1] is StreamStatus.RUNNING
    with pytest.raises(StreamStateError, match="already running"):
        lifecycle.start("orders")


def test_a_process_that_dies_is_error_naming_the_cause_and_its_restart_policy_starts_it_again(lifecycle):
    lifecycle, stream, runners, store = lifecycle
    lifecycle.start("orders")
    runners[0].die("was killed by signal 9")
    assert stream.status is StreamStatus.ERROR
    assert stream.error.startswith("stream process was killed by signal 9; restarting in 0.05 s (restart 1)")
    wait_until(lambda: len(runners) == 2, 10, what="the restart after the backoff")
    assert stream.runner is runners[1] and stream.restarts == 1


def test_a_stop_keeps_the_stream_stopped_and_a_runner_that_dies_after_it_is_not_restarted(lifecycle):
    lifecycle, stream, runners, store = lifecycle
    lifecycle.start("orders")
    first = runners[0]
    lifecycle.stop("orders")
    assert first.stopped.is_set() and stream.runner is None
    assert stored(store) == (False, StreamStatus.STOPPED, None)
    first.die("exited with code 1")   # late news of the old runner: not this stream's runner any more
    assert stream.status is StreamStatus.STOPPED and len(runners) == 1
