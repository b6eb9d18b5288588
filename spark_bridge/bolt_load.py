"""Loading a backfill into Memgraph over Bolt the way Memgraph recommends for bulk imports.

- **Nodes before relationships, in UNWIND batches.** A batch's statements are
  grouped by query text, node writes before relationship writes, so the
  relationship statements find their end nodes (`stream_registry.graph.unwind.
  nodes_first`; barriers such as DELETE keep their place); the Bolt sink then
  sends each group as one `UNWIND` statement (`unwind.fold`, the folding the
  live streams use): one round trip per group instead of one per message.
- **One transaction per batch** (the Bolt sink's contract), and a bounded
  number of **concurrent writers per executor host**: every transaction holds
  one of `writers` slots (file locks under the temporary directory, per target
  server), so Spark tasks on one machine never open more than `writers`
  concurrent transactions against one Memgraph, however many cores it has.
- **Preparing the graph**: `prepare_statements(transform)` lists the indexes
  and uniqueness constraints a built-in transformation's MERGE keys need (a
  transformation module may declare its own as `MGSTREAMS_PREPARE`, a list of
  Cypher statements); `prepare_graph` runs them, each in its own autocommit
  transaction (Memgraph refuses index changes inside a multi-statement one).

Memgraph's guidance for big loads: create indexes first (MERGE looks its key
up), uniqueness constraints on MERGE keys (parallel writers that MERGE the same
node then conflict and retry instead of creating duplicates), and
`STORAGE MODE IN_MEMORY_ANALYTICAL;` for an initial import (no transactions to
conflict; switch back with `STORAGE MODE IN_MEMORY_TRANSACTIONAL;`).
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit

from stream_registry.errors import ConfigError, SinkError
from stream_registry.graph.sinks.bolt import BoltSink
from stream_registry.graph.sinks.schemes import open_sink
from stream_registry.graph.transform import load_transformation

DEFAULT_WRITERS = 2
MAX_WRITERS = 64
PREPARE_ATTRIBUTE = "MGSTREAMS_PREPARE"
BOLT_SCHEMES = ("bolt", "bolt+s", "bolt+ssc")

_KAFKA_MESSAGE = (
    "CREATE INDEX ON :KafkaMessage(topic, partition, offset);",
    "CREATE CONSTRAINT ON (m:KafkaMessage) ASSERT m.topic, m.partition, m.offset IS UNIQUE;",
)
_BUILTINS = "stream_registry.builtin_transformations"
BUILTIN_PREPARE: Mapping[str, tuple[str, ...]] = {
    f"{_BUILTINS}.merge_messages": _KAFKA_MESSAGE,
    f"{_BUILTINS}.merge_messages_batched": _KAFKA_MESSAGE,
    # CREATE per delivery: a uniqueness constraint would fail every replay, so an index only
    f"{_BUILTINS}.create_messages": ("CREATE INDEX ON :KafkaMessage(topic, partition, offset);",),
    f"{_BUILTINS}.json_nodes": (
        "CREATE INDEX ON :KafkaRecord(topic, partition, offset);",
        "CREATE CONSTRAINT ON (n:KafkaRecord) ASSERT n.topic, n.partition, n.offset IS UNIQUE;",
    ),
}


def is_bolt_uri(uri: str) -> bool:
    return isinstance(uri, str) and urlsplit(uri).scheme.lower() in BOLT_SCHEMES


# -- concurrent writers per executor host ----------------------------------------------------
class WriterSlots:
    """At most `writers` concurrent transactions per host against one Bolt server, across processes.

    A slot is an exclusive `flock` on one of `writers` files in
    `<tmp>/mgstreams-bolt-writers/<server hash>/`; the kernel releases it if the
    holder dies, so a killed task never leaks a slot.
    """

    def __init__(self, sink_uri: str, writers: int, directory: str | None = None):
        if type(writers) is not int or not 1 <= writers <= MAX_WRITERS:
            raise ConfigError(f"writers: expected an integer in 1..{MAX_WRITERS}, got {writers!r}")
        parts = urlsplit(sink_uri)
        server = f"{parts.scheme.lower()}://{parts.hostname}:{parts.port or 7687}"
        digest = hashlib.sha256(server.encode()).hexdigest()[:16]
        base = directory or os.path.join(tempfile.gettempdir(), f"mgstreams-bolt-writers-{os.getuid()}")
        self.directory = os.path.join(base, digest)
        self.writers = writers

    @contextmanager
    def slot(self) -> Iterator[int]:
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        fds = []
        try:
            for index in self._order():
                fd = os.open(os.path.join(self.directory, f"slot-{index}"), os.O_RDWR | os.O_CREAT, 0o600)
                fds.append(fd)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                yield index
                return
            fcntl.flock(fds[0], fcntl.LOCK_EX)  # every slot busy: wait for this process's first choice
            yield self._order()[0]
        finally:
            for fd in fds:
                os.close(fd)  # closing the descriptor releases its lock

    def _order(self) -> list[int]:
        first = os.getpid() % self.writers
        return [(first + i) % self.writers for i in range(self.writers)]


# -- preparing the graph ---------------------------------------------------------------------
def prepare_statements(transform: str, search_dirs: Sequence[str] = ()) -> tuple[str, ...]:
    """The index and constraint statements `transform` needs; ConfigError naming it if none are known."""
    known = BUILTIN_PREPARE.get(transform)
    if known is not None:
        return known
    fn = load_transformation(transform, search_dirs)
    module = sys.modules.get(getattr(getattr(fn, "__wrapped__", fn), "__module__", "") or "")
    declared = getattr(module, PREPARE_ATTRIBUTE, None)
    if isinstance(declared, (list, tuple)) and declared and all(isinstance(s, str) and s.strip()
                                                                 for s in declared):
        return tuple(declared)
    if declared is not None:
        raise ConfigError(f"prepare: {transform!r} declares {PREPARE_ATTRIBUTE} = {declared!r:.120}; "
                          f"expected a non-empty list of Cypher statements")
    raise ConfigError(f"prepare: no indexes or constraints are known for transform {transform!r} "
                      f"(built-ins: {', '.join(sorted(BUILTIN_PREPARE))}; a transformation module can "
                      f"declare {PREPARE_ATTRIBUTE} = [\"CREATE INDEX ON :Label(key);\", ...])")


class PrepareStatus(StrEnum):
    CREATED = "created"
    EXISTS = "exists"


@dataclass(frozen=True)
class PrepareResult:
    statement: str
    status: PrepareStatus


_EXISTS = re.compile(r"already exists|exists already", re.I)


def prepare_graph(sink_uri: str, credentials: Mapping[str, str], statements: Sequence[str]) -> list[PrepareResult]:
    """Run each statement in its own autocommit transaction; one that exists already is fine."""
    if not is_bolt_uri(sink_uri):
        raise ConfigError(f"prepare: needs a bolt://, bolt+s:// or bolt+ssc:// sink, got {sink_uri!r}")
    sink = open_sink(sink_uri, credentials)   # its connection: TLS and credentials as for the load
    if not isinstance(sink, BoltSink):   # is_bolt_uri said so: a bolt URI opens a BoltSink
        sink.close()
        raise ConfigError(f"prepare: {sink_uri!r} did not open a Bolt connection")
    results = []
    try:
        for statement in statements:
            try:
                # autocommit: Memgraph refuses index changes inside a multi-statement transaction
                sink.run_autocommit(statement.rstrip().rstrip(";"))
                results.append(PrepareResult(statement, PrepareStatus.CREATED))
            except SinkError as exc:
                if not _EXISTS.search(str(exc)):
                    raise SinkError(f"prepare: {exc}") from None
                results.append(PrepareResult(statement, PrepareStatus.EXISTS))
    finally:
        sink.close()
    return results
