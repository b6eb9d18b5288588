"""`CALL streams.*`: Kafka streams managed from Cypher.

Every procedure validates its arguments, calls the process-wide registry
(`stream_registry.default_registry()`, state in $MGSTREAMS_STATE_DIR) and
shapes its result into records; the Kafka work lives in `stream_registry`.
A failure of any kind reaches the client as one error whose last line says
what was wrong (the field and the value); nothing escapes as a crash.

Offsets use Memgraph's dialect: -1 is the beginning, -2 the end, as in
`mg.kafka_set_stream_offset`; prefer "earliest" / "latest".

No `from __future__ import annotations` here: mgp reads the annotations as
types to build each procedure's Cypher signature.
"""
import datetime
from typing import Callable, TypeVar

import mgp

from stream_registry import StreamConfig, StreamError, default_registry

DEFAULT_SINK = "bolt://localhost:7687"
# `transform => ""` stores every message as an idempotent (:KafkaMessage) node.
DEFAULT_TRANSFORM = "stream_registry.builtin_transformations.merge_messages"

T = TypeVar("T")

StatusRecord = mgp.Record(name=str, status=str)


def _call(action: Callable[[], T]) -> T:
    """Run a registry call; every failure becomes one plain Exception with a one-line reason."""
    try:
        return action()
    except StreamError as exc:
        reason = str(exc)
    except Exception as exc:  # a bug must reach the client as an error, never take the server down
        reason = f"internal error: {type(exc).__name__}: {exc}"
    raise Exception(reason)


def _map(value: object, field: str) -> dict:
    """mgp.Map also admits nodes and relationships; only a real map is meant here."""
    if not isinstance(value, dict):
        raise Exception(f"{field}: expected a map, got {type(value).__name__}")
    return dict(value)


def _status(info) -> mgp.Record:
    return mgp.Record(name=info.name, status=str(info.status.value))


@mgp.read_proc
def create(name: str, topics: mgp.List[str], bootstrap_servers: str, transform: str = "",
           sink: str = DEFAULT_SINK, consumer_group: str = "", batch_size: int = 1000,
           batch_interval_ms: int = 100, configs: mgp.Map = {}, credentials: mgp.Map = {}
           ) -> StatusRecord:
    """Create a stream (stopped): topics, brokers, transformation `module.function`, graph sink URI.

    An empty transform stores each message as a (:KafkaMessage) node; an empty
    consumer_group means `mgstreams_<name>`. Nothing is stored when a check fails.
    """
    configs, credentials = _map(configs, "configs"), _map(credentials, "credentials")
    return _status(_call(lambda: default_registry().create(StreamConfig(
        name=name, topics=[*topics], bootstrap_servers=bootstrap_servers,
        transform=transform or DEFAULT_TRANSFORM, sink=sink, consumer_group=consumer_group or None,
        batch_size=batch_size, batch_interval_ms=batch_interval_ms, configs=configs, credentials=credentials))))


@mgp.read_proc
def start(name: str) -> StatusRecord:
    """Start consuming; the status is "starting" until the group assigns partitions."""
    return _status(_call(lambda: default_registry().start(name)))


@mgp.read_proc
def stop(name: str) -> StatusRecord:
    """Stop consuming and leave the consumer group (offsets stay committed)."""
    return _status(_call(lambda: default_registry().stop(name)))


@mgp.read_proc
def drop(name: str) -> StatusRecord:
    """Stop the stream if it runs and forget it; returns its last status."""
    return _status(_call(lambda: default_registry().drop(name)))


def _procedure_name(name: str):
    """Register a procedure under a name that would shadow a builtin as a Python function."""
    def rename(fn):
        fn.__name__ = name
        return fn
    return rename


@mgp.read_proc
@_procedure_name("list")
def list_streams() -> mgp.Record(name=str, topics=mgp.List[str], consumer_group=str, bootstrap_servers=str,
                         transform=str, sink=str, status=str, error=mgp.Nullable[str], configs=mgp.Map,
                         credentials=mgp.Map):
    """Every stream with its configuration; secrets in configs and all credentials are masked."""
    return [mgp.Record(name=info.name, topics=[*info.topics], consumer_group=info.consumer_group,
                       bootstrap_servers=info.bootstrap_servers, transform=info.transform, sink=info.sink,
                       status=str(info.status.value), error=info.error, configs=dict(info.configs),
                       credentials=dict(info.credentials))
            for info in _call(lambda: default_registry().list())]


@mgp.read_proc
def set_stream_offset(name: str, offset: mgp.Any, timeout_ms: int = 10000, dry_run: bool = False
                      ) -> mgp.Record(topic=str, partition=int, previous_offset=mgp.Nullable[int],
                                      offset=mgp.Nullable[int], status=str, message=str):
    """Move the stream's consumer on every partition the offset spec targets.

    offset: an integer (-1 beginning, -2 end, N >= 0), a string ("earliest",
    "latest", "committed", "+N"/"-N" relative, an ISO-8601 datetime) or a map
    {topic: spec, "topic:partition": spec}. One record per partition: status
    "applied"/"clamped" once the consumer holds the partition, "pending" while a
    rebalance is due (applied at assignment), "planned" with dry_run.
    """
    if isinstance(timeout_ms, bool) or timeout_ms <= 0:
        raise Exception(f"timeout_ms: must be a positive number of milliseconds, got {timeout_ms!r}")
    changes = _call(lambda: default_registry().set_offset(name, offset, timeout=timeout_ms / 1000.0,
                                                          dry_run=dry_run))
    return [mgp.Record(topic=c.topic, partition=c.partition, previous_offset=c.previous_offset, offset=c.offset,
                       status=str(c.status.value), message=c.message or "")
            for c in changes]


@mgp.read_proc
def offsets(name: str) -> mgp.Record(topic=str, partition=int, committed_offset=mgp.Nullable[int],
                                     position=mgp.Nullable[int], log_start_offset=int, log_end_offset=int,
                                     lag=mgp.Nullable[int], assigned=bool):
    """Per partition: committed offset, consumer position, log start/end, lag, held by this stream."""
    return [mgp.Record(topic=p.topic, partition=p.partition, committed_offset=p.committed_offset,
                       position=p.position, log_start_offset=p.log_start_offset, log_end_offset=p.log_end_offset,
                       lag=p.lag, assigned=bool(p.assigned))
            for p in _call(lambda: default_registry().describe(name))]


@mgp.read_proc
def history(name: str) -> mgp.Record(changed_at=mgp.LocalDateTime, topic=str, partition=int,
                                     previous_offset=mgp.Nullable[int], offset=int, status=str):
    """The audit of offset changes applied to the stream, newest first; changed_at is UTC."""
    return [mgp.Record(changed_at=_utc(h.changed_at), topic=h.topic, partition=h.partition,
                       previous_offset=h.previous_offset, offset=h.offset, status=str(h.status.value))
            for h in _call(lambda: default_registry().history(name))]


def _utc(moment: datetime.datetime) -> datetime.datetime:
    """Memgraph's LocalDateTime has no zone: hand it the UTC wall clock."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return moment
