"""Which engine runs a stream (stream_registry/registry/runners/engines.py): the one place the registry picks; an
engine handed in by name is chosen by the stream's config, the built-in one runs `tasks: N` as a TaskRunner of N
runners of its own kind, and a name this host does not have is refused naming the engine and the known ones."""
from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from stream_registry.config import StreamConfig
from stream_registry.errors import ConfigError
from stream_registry.graph.sinks.policy import OutputPolicy
from stream_registry.model import DEFAULT_RETRY
from stream_registry.registry.runners.engine import RunRequest
from stream_registry.registry.runners.engines import KAFKA, Engines
from stream_registry.registry.runners.restarts import DEFAULT_RESTART_BACKOFF
from stream_registry.registry.runners.runner import Isolation, ThreadRunner
from stream_registry.registry.runners.stream_process import ProcessRunner
from stream_registry.registry.runners.task_runner import TaskRunner
from stream_registry.registry.stream.stream_events import StreamEvents


def request(name: str = "orders", tasks: int = 1) -> RunRequest:
    config = StreamConfig(name, ["t"], "localhost:9092", "stream_helpers.offsets_transform", "null://", tasks=tasks)
    return RunRequest(config, pending=dict, output=OutputPolicy(()), retry=DEFAULT_RETRY, events=StreamEvents(),
                      stop_timeout=1.0, memory_limit_mb=None, on_exit=lambda runner, cause: None,
                      backoff=DEFAULT_RESTART_BACKOFF, lock=threading.Lock(), host_stopping=lambda: False)


def test_the_builtin_engine_runs_a_stream_where_the_registry_isolates_it_and_n_tasks_as_one_runner():
    assert isinstance(Engines(Isolation.THREAD).runner(request()), ThreadRunner)
    assert isinstance(Engines(Isolation.PROCESS).runner(request()), ProcessRunner)
    tasks = Engines(Isolation.PROCESS).runner(request(tasks=2))
    assert isinstance(tasks, TaskRunner) and tasks.pids == () and tasks.restarts == 0


def test_an_engine_handed_in_by_name_runs_the_streams_its_config_selects():
    made = []
    engines = Engines(Isolation.THREAD, {"query": lambda req: made.append(req) or "a query runner"},
                      engine_of=lambda config: "query" if config.name.startswith("q") else KAFKA)
    assert engines.runner(request("q1")) == "a query runner" and made[0].config.name == "q1"
    assert isinstance(engines.runner(request("orders")), ThreadRunner)


def test_an_engine_this_host_lacks_is_refused_naming_it_and_the_known_ones():
    engines = Engines(Isolation.THREAD, {"query": lambda req: None}, engine_of=lambda config: "spark")
    with pytest.raises(ConfigError, match=r"^engine: 'spark' cannot run on this host \(known here: kafka, query\)$"):
        engines.runner(request())


def test_a_streams_engine_field_selects_its_engine_and_one_named_unavailable_is_refused_saying_why():
    spark = replace(request().config, engine="spark")
    made = []
    engines = Engines(Isolation.THREAD, {"spark": lambda req: made.append(req) or "a query runner"})
    assert engines.runner(replace(request(), config=spark)) == "a query runner"
    assert isinstance(engines.runner(request()), ThreadRunner)   # engine: host is the built-in one
    lacking = Engines(Isolation.THREAD, unavailable={"spark": "pyspark is not installed here"})
    with pytest.raises(ConfigError, match=r"^engine: 'spark' cannot run on this host \(pyspark is not installed here\)$"):
        lacking.check(spark)
    lacking.check(request().config)
