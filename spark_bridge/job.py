"""The backfill job as plain Python: what to replay, how one range is loaded, and the report.

Both engines run this code: Spark (`backfill.run_backfill`, one task per range)
and the local engine (`local_engine.run_local`, every range in this process).
Nothing here imports pyspark, pyarrow or pandas, so `mgstreams backfill
--engine local` works on an install without the `[spark]` extra.

Retries. A Spark task may run more than once (a failure, a lost executor,
speculation). Bolt sinks commit one transaction per batch, so a retried task
replays batches that were already committed: the graph is unchanged only if
the transformation is idempotent (MERGE on topic/partition/offset, e.g.
`merge_messages`, `merge_messages_batched`, `json_nodes`). A `cypherl://DIR`
sink writes one file per range, `<topic>-<partition>-<from>-<until>.cypherl`,
through a temporary name renamed into place when the range is done, so a
retried task replaces its own file and never appends a second copy.
"""
from __future__ import annotations

import gc
import os
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from stream_registry.errors import ConfigError
from stream_registry.formats import Decoder
from stream_registry.graph.sinks.schemes import open_sink, validate_sink_uri
from stream_registry.graph.transform import Message, decode_all, load_transformation, run_transformation, wrap
from stream_registry.graph.unwind import nodes_first
from stream_registry.kafka.queries import PartitionQuery
from stream_registry.model import PartitionKey
from stream_registry.offset_spec import OffsetSpec

from .bolt_load import DEFAULT_WRITERS, MAX_WRITERS, WriterSlots, is_bolt_uri
from .range_plan import OffsetRange, RangePlan, plan
from .range_reader import RangeReader
from .source_options import check_client_config


@dataclass(frozen=True)
class BackfillJob:
    """What to replay and where to write it; `client_config` is librdkafka's (group.id names the
    group whose committed offsets `until=committed` means). `writers` bounds the concurrent Bolt
    transactions per executor host (tasks on one machine share the bound). `resume_offsets`, for a
    registered stream, is its resume point per partition (`handoff.stream_resume_offsets`): what
    `committed` means instead of the group's committed offsets in Kafka."""
    bootstrap_servers: str
    topics: tuple[str, ...]
    start: OffsetSpec
    until: OffsetSpec
    transform: str
    sink: str
    client_config: Mapping[str, str] = field(default_factory=dict, repr=False)
    sink_credentials: Mapping[str, str] = field(default_factory=dict, repr=False)
    search_dirs: tuple[str, ...] = ()
    batch_size: int = 1000
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    writers: int = DEFAULT_WRITERS
    resume_offsets: Mapping[PartitionKey, int] | None = None
    # how records are decoded (formats.Decoder's arguments: key_format, value_format, registry_url, credentials:
    # a registered stream's, `decoding_of`) and the transformation's options: the stream's, decoded the same way
    decoding: Mapping[str, Any] = field(default_factory=dict, repr=False)
    transform_options: Mapping[str, Any] = field(default_factory=dict)

    def consumer_config(self) -> dict[str, object]:
        return {**self.client_config, "bootstrap.servers": self.bootstrap_servers, "group.id": self.group_id}

    @property
    def group_id(self) -> str:
        """The group asked for committed offsets (never joined, never committed to)."""
        return str(self.client_config.get("group.id") or "mgstreams-backfill")

    def loading(self) -> Loading:
        return Loading(self.transform, tuple(self.search_dirs), self.sink, dict(self.sink_credentials),
                       self.batch_size, self.writers, dict(self.decoding), dict(self.transform_options))

    def validate(self) -> None:
        """Everything that can be checked without the cluster or Spark; raises ConfigError."""
        if not self.topics:
            raise ConfigError("topics: no topic given")
        if type(self.batch_size) is not int or self.batch_size < 1:
            raise ConfigError(f"batch_size: expected a positive integer, got {self.batch_size!r}")
        if self.min_partitions is not None and (type(self.min_partitions) is not int or self.min_partitions < 1):
            raise ConfigError(f"min_partitions: expected a positive integer, got {self.min_partitions!r}")
        if type(self.writers) is not int or not 1 <= self.writers <= MAX_WRITERS:
            raise ConfigError(f"writers: expected an integer in 1..{MAX_WRITERS}, got {self.writers!r}")
        validate_sink_uri(self.sink)
        load_transformation(self.transform, self.search_dirs, options=self.transform_options)
        check_client_config(self.consumer_config())


@dataclass(frozen=True)
class PartitionStats:
    range_index: int
    topic: str
    partition: int
    from_offset: int
    until_offset: int
    records: int
    statements: int
    batches: int
    seconds: float
    attempt: int
    output: str

    @property
    def range(self) -> OffsetRange:
        return OffsetRange(self.topic, self.partition, self.from_offset, self.until_offset)

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class BackfillReport:
    plan: RangePlan
    partitions: tuple[PartitionStats, ...]
    started_at: datetime
    seconds: float

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    @property
    def statements(self) -> int:
        return sum(p.statements for p in self.partitions)

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        return {
            "started_at": self.started_at.isoformat(),
            "seconds": round(self.seconds, 3),
            "records": self.records,
            "statements": self.statements,
            "records_per_second": round(self.rate, 1),
            "notes": self.plan.notes,
            "partitions": [{**asdict(p), "seconds": round(p.seconds, 3), "records_per_second": round(p.rate, 1)}
                           for p in self.partitions],
        }


def decoding_of(config: Any) -> dict[str, Any]:
    """A registered stream's formats (a StreamConfig) as BackfillJob.decoding."""
    return {"key_format": config.key_format, "value_format": config.value_format,
            "registry_url": config.schema_registry_url, "credentials": config.registry_credentials()}


def plan_job(job: BackfillJob) -> RangePlan:
    settings = {k: v for k, v in job.client_config.items() if k not in ("bootstrap.servers", "group.id")}
    with PartitionQuery(job.bootstrap_servers, job.group_id, settings) as query:
        return plan(query, job.topics, job.start, job.until, job.min_partitions,
                    fail_on_data_loss=job.fail_on_data_loss, resume_offsets=job.resume_offsets)


# -- loading one range --------------------------------------------------------------------
@dataclass(frozen=True)
class Loading:
    """How a task turns messages into graph writes: transformation, sink, batch size, Bolt writers.

    For Bolt sinks each batch's statements are grouped by query text, nodes before
    relationships (`unwind.nodes_first`), folded into UNWIND statements by the sink, and written in
    one transaction, holding one of `writers` slots of this host for its duration.
    """
    transform: str
    search_dirs: tuple[str, ...]
    sink: str
    sink_credentials: Mapping[str, str] = field(repr=False, default_factory=dict)
    batch_size: int = 1000
    writers: int = DEFAULT_WRITERS
    decoding: Mapping[str, Any] = field(repr=False, default_factory=dict)   # BackfillJob.decoding
    transform_options: Mapping[str, Any] = field(default_factory=dict)

    def write(self, index: int, r: OffsetRange, output: PartitionOutput,
              batches: Iterable[list[Message]], attempt: int) -> PartitionStats:
        """Transform and write message batches (already `batch_size` long) into one output."""
        started = time.perf_counter()
        fn = load_transformation(self.transform, self.search_dirs, options=self.transform_options)
        decoder = Decoder(**self.decoding)   # the stream's formats: the values its live transformation sees
        records = statements = written = 0
        bolt = is_bolt_uri(self.sink)
        slots = WriterSlots(self.sink, self.writers) if bolt else None
        sink = open_sink(output.uri, self.sink_credentials)
        try:
            for messages in batches:
                if decoder.active:
                    messages = [wrap(m, decoder) for m in messages]
                    decode_all(messages)
                produced = run_transformation(fn, messages, name=self.transform)
                if produced:
                    if slots is not None:
                        with slots.slot():
                            sink.write(nodes_first(produced))
                    else:
                        sink.write(produced)
                    written += 1
                records += len(messages)
                statements += len(produced)
            sink.close()
            output.commit()
        except BaseException:
            sink.close()
            output.abandon()
            raise
        return PartitionStats(index, r.topic, r.partition, r.from_offset, r.until_offset, records, statements,
                              written, time.perf_counter() - started, attempt, output.final)


def load_range(reader: RangeReader, index: int, r: OffsetRange, loading: Loading, attempt: int = 0) -> PartitionStats:
    """Read range `r` with `reader` and write it through `loading` into the range's own output."""
    output = PartitionOutput(loading.sink, r.name, attempt)
    messages = ([Message.from_kafka(m) for m in batch] for batch in reader.messages(r))
    with long_lived_objects_frozen():
        return loading.write(index, r, output, rebatch(messages, loading.batch_size), attempt)


@contextmanager
def long_lived_objects_frozen():
    """Keep the cyclic garbage collector off the objects that exist before a range is loaded.

    A range makes millions of short-lived objects, so the collector runs often,
    and each full collection walks every tracked object of the process: in a
    Spark Python worker that holds pyspark, pyarrow and pandas, that made a
    record cost about a quarter more CPU than in a bare process. `gc.freeze()`
    moves what exists now out of the collector's way for the duration (nothing
    is lost: reference counting still frees, and the objects are collected
    normally again after `gc.unfreeze()`). Left alone if someone froze already.
    """
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class PartitionOutput:
    """Where one task's statements go: for cypherl, `<dir>/<name>.cypherl` through a temporary file."""

    def __init__(self, sink_uri: str, name: str, attempt: int):
        parts = urlsplit(sink_uri)
        self.uri, self.final, self._temp = sink_uri, "", None
        if parts.scheme.lower() == "cypherl":
            directory = unquote(parts.path)
            self.final = os.path.join(directory, f"{name}.cypherl")
            self._temp = os.path.join(directory, f".{name}.attempt{attempt}-{uuid.uuid4().hex[:8]}.tmp")
            self.uri = f"cypherl://{quote(self._temp)}" + (f"?{parts.query}" if parts.query else "")

    def commit(self) -> None:
        if self._temp is not None:
            if not os.path.exists(self._temp):  # nothing was written: still one file per range
                open(self._temp, "wb").close()
            os.replace(self._temp, self.final)

    def abandon(self) -> None:
        if self._temp is not None:
            try:
                os.unlink(self._temp)
            except FileNotFoundError:
                pass


def rebatch(batches: Iterable[list], size: int) -> Iterator[list]:
    """Re-cut a stream of lists into lists of `size` (the last may be shorter)."""
    pending: list = []
    for batch in batches:
        pending.extend(batch)
        while len(pending) >= size:
            yield pending[:size]
            del pending[:size]
    if pending:
        yield pending
