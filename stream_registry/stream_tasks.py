"""`tasks: N`, a stream's member processes in its consumer group (Kafka Connect's tasks.max): what a valid N is.

The group protocol spreads the partitions over the N members; a sink must take N writers at once. A Bolt sink
does (its exactly-once compare-and-set is per partition, so two tasks never write the same partition's
offsets); a cypherl file has one writer at a time (a task opening it cuts an unfinished batch off its end,
which could be another task's batch in flight), so a file sink runs one task. The runner of N tasks is
registry/runners/task_runner.py.
"""
from __future__ import annotations

from .errors import ConfigError
from .graph.sinks.cypherl import CypherlSettings
from .graph.sinks.schemes import parse_sink_uri

MAX_TASKS = 32   # member processes of one stream on one host; a partition is the unit of parallelism anyway


def check_tasks(tasks: object, sink: object) -> None:
    """ConfigError naming `tasks` and its value unless it is an integer 1..MAX_TASKS the sink can take."""
    if isinstance(tasks, bool) or not isinstance(tasks, int) or not 1 <= tasks <= MAX_TASKS:
        raise ConfigError(f"tasks: must be an integer from 1 to {MAX_TASKS} (member processes of the stream's "
                          f"consumer group), got {repr(tasks)[:80]}")
    if tasks > 1 and isinstance(sink, str):
        _, settings = parse_sink_uri(sink)   # a malformed URI is the sink's error, named `sink`
        if isinstance(settings, CypherlSettings):
            raise ConfigError(f"tasks: {tasks} needs a sink that takes {tasks} writers at once (bolt://, null://); "
                              f"a cypherl file has one writer at a time (each task opening it would cut off "
                              f"another's unfinished batch), so a cypherl stream runs 1 task")
