"""A stream or task that starts while an offset call is being resolved is told of that call before its consumer is
made (stream_registry/registry/runners/announced_calls.py), so its first assignment is held for the call as one
announced after its start is (calls_coming.py): through a stream process's spawn spec, and a thread runner's worker
on the embedded cluster. The task runner's part: tests/unit/test_task_runner.py."""
from __future__ import annotations

import pytest

from stream_registry.config import StreamConfig
from stream_registry.graph.sinks.policy import OutputPolicy
from stream_registry.model import DEFAULT_RETRY
from stream_registry.registry.runners import stream_process
from stream_registry.registry.runners.runner import ThreadRunner
from stream_registry.registry.runners.stream_process import ProcessRunner
from stream_registry.registry.stream.stream_events import StreamEvents


def _config(kafka, topic: str) -> StreamConfig:
    return StreamConfig("orders", [topic], kafka.bootstrap_servers, "stream_helpers.offsets_transform", "null://",
                        consumer_group=f"g_{topic}")


class Spawned(Exception):
    """The spawn stand-in's way out: the spec was seen, no child is made."""


def test_a_stream_process_spawned_while_a_call_is_coming_gets_the_call_in_its_spec(kafka, monkeypatch):
    seen = []

    def spawn_child(target, args, name, **kwargs):
        seen.append(args[0])
        raise Spawned
    monkeypatch.setattr(stream_process, "spawn_child", spawn_child)
    runner = ProcessRunner(_config(kafka, "t"), pending={}, output=OutputPolicy(()), retry=DEFAULT_RETRY,
                           events=StreamEvents(), on_exit=lambda runner, cause: None)
    runner.call_coming(1, 30.0)
    runner.call_coming(2, 30.0)
    runner.call_ended(2)
    with pytest.raises(Spawned):
        runner.start()
    [spec] = seen
    assert set(spec.calls) == {1} and 29.0 < spec.calls[1] <= 30.0, "the call still coming, with what is left of it"


def test_a_stream_started_while_a_call_is_coming_holds_for_it_until_it_ends(kafka):
    topic = kafka.new_topic(partitions=1)
    runner = ThreadRunner(_config(kafka, topic), pending={}, output=OutputPolicy(()), retry=DEFAULT_RETRY,
                          events=StreamEvents(), calls={7: 30.0})
    try:
        runner.call_coming(8, 30.0)
        runner.start()
        calls = runner._worker.calls
        assert calls.any(), "both calls announced before the start reach its worker before its consumer is made"
        runner.call_ended(7)
        assert calls.any()
        runner.call_ended(8)
        assert not calls.any(), "no call coming once both ended"
    finally:
        runner.stop(10.0)
