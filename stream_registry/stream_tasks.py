"""`tasks: N`, a stream's member processes in its consumer group (Kafka Connect's tasks.max): what a valid N is,
and the sink each task writes to.

The group protocol spreads the partitions over the N members; a sink must take N writers at once. A Bolt sink
does (its exactly-once compare-and-set is per partition, so two tasks never write the same partition's
offsets). A cypherl file has one writer at a time (a task opening it cuts an unfinished batch off its end, which
could be another task's batch in flight), so at least once each task writes a file of its own beside the one
named: `orders.cypherl` with tasks: 2 is `orders.task-0.cypherl` and `orders.task-1.cypherl` (`orders.task-*.cypherl`
finds them all). Exactly once refuses more than one task on a cypherl sink: a partition moving from one task to
another would move its stored offsets to another file, and the offsets one file stores would no longer say where
the stream stands. The runner of N tasks is registry/runners/task_runner.py.
"""
from __future__ import annotations

from pathlib import PurePosixPath
from urllib.parse import urlsplit

from .errors import ConfigError
from .graph.sinks.cypherl import CypherlSettings
from .graph.sinks.schemes import parse_sink_uri

MAX_TASKS = 32   # member processes of one stream on one host; a partition is the unit of parallelism anyway
EXACTLY_ONCE = "exactly_once"   # config.Delivery's value (config imports this module)


def check_tasks(tasks: object, sink: object, delivery: object = None) -> None:
    """ConfigError naming `tasks` and its value unless it is an integer 1..MAX_TASKS the sink can take."""
    if isinstance(tasks, bool) or not isinstance(tasks, int) or not 1 <= tasks <= MAX_TASKS:
        raise ConfigError(f"tasks: must be an integer from 1 to {MAX_TASKS} (member processes of the stream's "
                          f"consumer group), got {repr(tasks)[:80]}")
    if tasks > 1 and isinstance(sink, str) and str(delivery) == EXACTLY_ONCE:
        _, settings = parse_sink_uri(sink)   # a malformed URI is the sink's error, named `sink`
        if isinstance(settings, CypherlSettings):
            raise ConfigError(f"tasks: {tasks} with delivery exactly_once needs a sink that stores every "
                              f"partition's offsets in one place (bolt://, null://): a cypherl stream's tasks write "
                              f"a file each, and a partition moving between tasks would leave its stored offsets in "
                              f"another file; at least once, a cypherl stream takes {tasks} tasks (a file each)")


def task_sink(sink: str, index: int, tasks: int) -> str:
    """The sink task `index` of `tasks` writes to: a cypherl file of its own (`<stem>.task-<index><suffix>`,
    beside the one named) when there are several tasks, else the stream's sink."""
    if tasks <= 1:
        return sink
    _, settings = parse_sink_uri(sink)
    if not isinstance(settings, CypherlSettings):
        return sink
    parts = urlsplit(sink)
    path = PurePosixPath(parts.path)
    named = path.with_name(f"{path.stem}.task-{index}{path.suffix}")
    return f"{parts.scheme}://{parts.netloc}{named}" + (f"?{parts.query}" if parts.query else "")
