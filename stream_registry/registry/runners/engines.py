"""Which engine runs a stream: the one place the registry picks (engine.py says what an engine is).

The built-in engine, "kafka", runs a stream's confluent-kafka consumer on a
poll thread of this process (Isolation.THREAD: embedding, tests) or in a child
process of its own (Isolation.PROCESS: the stream host), and a stream of
`tasks: N` as N of those under one TaskRunner. Others are handed in by the
application with the name a stream's config selects (`engine_of`).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from ...config import StreamConfig
from ...errors import ConfigError
from ...stream_tasks import task_sink
from .engine import Engine, RunRequest, StreamRunner
from .runner import Isolation, ThreadRunner
from .stream_process import ProcessRunner
from .task_runner import TaskRunner

KAFKA = "kafka"


def kafka_engine(isolation: Isolation) -> Engine:
    """The consumer engine: one runner per stream, or a TaskRunner over one per task."""
    def one(request: RunRequest) -> StreamRunner:
        config = request.config
        if isolation == Isolation.PROCESS:
            return ProcessRunner(config, pending=request.pending(), output=request.output, retry=request.retry,
                                 events=request.events, stop_timeout=request.stop_timeout,
                                 memory_limit_mb=request.memory_limit_mb, on_exit=request.on_exit,
                                 marks=request.marks)
        return ThreadRunner(config, pending=request.pending(), output=request.output, retry=request.retry,
                            events=request.events, marks=request.marks)

    def run(request: RunRequest) -> StreamRunner:
        if request.config.tasks > 1:   # N member processes, one runner (task_runner)
            return TaskRunner(request.config, events=request.events, backoff=request.backoff, lock=request.lock,
                              host_stopping=request.host_stopping,
                              new_task=lambda events, on_exit, index: one(replace(
                                  request, events=events, on_exit=on_exit,
                                  config=replace(request.config, sink=task_sink(request.config.sink, index,
                                                                                request.config.tasks)))))
        return one(request)
    return run


class Engines:
    """The engines a registry runs streams with, by name, and which one a stream's config selects."""

    def __init__(self, isolation: Isolation, extra: Mapping[str, Engine] | None = None,
                 engine_of: Callable[[StreamConfig], str] = lambda config: KAFKA):
        self._engines: dict[str, Engine] = {KAFKA: kafka_engine(isolation), **(extra or {})}
        self._engine_of = engine_of

    def runner(self, request: RunRequest) -> StreamRunner:
        """A new runner for the stream, not started."""
        name = self._engine_of(request.config)
        engine = self._engines.get(name)
        if engine is None:
            raise ConfigError(f"engine: no engine named {name!r} here (known: {', '.join(sorted(self._engines))})")
        return engine(request)
