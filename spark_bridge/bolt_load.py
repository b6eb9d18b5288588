"""Loading a backfill into Memgraph over Bolt the way Memgraph recommends for bulk imports.

- **UNWIND batches.** The statements one batch of messages turned into are
  grouped by query text, and each group becomes one
  `UNWIND $mgstreams_rows AS mgstreams_row <query>` statement whose `$name`
  parameters read `mgstreams_row.name`: one round trip per group instead of one
  per message. A query that cannot be rewritten that way (it already starts
  with UNWIND, carries WITH, or uses a parameter where Cypher wants a literal or
  a property map: `LIMIT $n`, `(n $props)`) is written as it is.
- **Nodes before relationships.** When a batch holds both node writes and
  relationship writes (a transformation that declares both, as separate
  statements), all node groups are written before the relationship groups, so
  the relationship statements find their end nodes. Statements that could
  depend on order in other ways (DELETE, REMOVE, CALL, FOREACH, LOAD, index
  and constraint commands, anything not a MATCH/MERGE/CREATE/SET write) are
  barriers: nothing moves across them.
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
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import Iterator, Mapping, Sequence
from urllib.parse import urlsplit

from stream_registry.errors import ConfigError, SinkError
from stream_registry.graph.sinks import open_sink
from stream_registry.graph.transform import Statement, load_transformation

DEFAULT_WRITERS = 2
MAX_WRITERS = 64
ROWS_PARAMETER = "mgstreams_rows"
ROW_VARIABLE = "mgstreams_row"
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


# -- statements into UNWIND batches -----------------------------------------------------
class WriteKind(Enum):
    NODE = "node"                  # MATCH/MERGE/CREATE/SET without a relationship pattern
    RELATIONSHIP = "relationship"  # the same with a relationship pattern
    BARRIER = "barrier"            # anything else: keeps its place, nothing moves across it


_STRING_OR_COMMENT = re.compile(r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|`[^`]*`|//[^\n]*|/\*.*?\*/""", re.S)
_PARAMETER = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RELATIONSHIP = re.compile(r"\)\s*<?-\s*\[|\]\s*-\s*>?\s*\(|\)\s*<?--\s*>?\s*\(")
# a keyword as a clause, not a property key (`{index: 1}`), a property (`n.load`) or a label (`:Call`)
_CLAUSE = r"(?<![.:\w$])(?:{})\b(?!\s*:)"
_WRITE = re.compile(_CLAUSE.format("MERGE|CREATE"), re.I)
_SET = re.compile(_CLAUSE.format("SET"), re.I)
_UNSAFE = re.compile(_CLAUSE.format("DELETE|DETACH|REMOVE|CALL|FOREACH|LOAD|DROP|INDEX|CONSTRAINT|STORAGE|USING|"
                                    "PERIODIC|TRIGGER|ANALYZE|FREE"), re.I)
_NO_ROW_SCOPE = re.compile(_CLAUSE.format("WITH"), re.I)
# words after which a parameter is an ordinary expression (anything else before it is a variable
# or a label: a property-map position, `(n $props)`, which takes no `row.field`)
_EXPRESSION_WORDS = frozenset({"IN", "AND", "OR", "XOR", "NOT", "WHEN", "THEN", "ELSE", "RETURN", "WHERE",
                               "CONTAINS", "STARTS", "ENDS", "IS", "DISTINCT", "CASE", "UNWIND", "SET", "AS"})
_LITERAL_ONLY_WORDS = frozenset({"SKIP", "LIMIT"})


@dataclass(frozen=True)
class QueryShape:
    """What `unwind_statements` needs to know about one query text."""
    kind: WriteKind
    unwindable: bool
    unwound: str | None = None      # the query with `$p` replaced by `mgstreams_row.p`


def query_shape(query: str) -> QueryShape:
    code = _STRING_OR_COMMENT.sub(lambda m: " " * len(m.group(0)), query)  # same length, no literals
    if _UNSAFE.search(code) or not _WRITE.search(code) and not _SET.search(code):
        return QueryShape(WriteKind.BARRIER, False)
    kind = WriteKind.RELATIONSHIP if _RELATIONSHIP.search(code) else WriteKind.NODE
    stripped = code.lstrip()
    if stripped[:6].upper() == "UNWIND" or _NO_ROW_SCOPE.search(code) or ROW_VARIABLE in query:
        return QueryShape(kind, False)
    pieces, at = [], 0
    for match in _PARAMETER.finditer(code):
        before = code[:match.start()].rstrip()
        word = _WORD.search(before[-40:][::-1]) if before and (before[-1].isalnum() or before[-1] == "_") else None
        if word is not None:
            previous = word.group(0)[::-1].upper()
            if previous in _LITERAL_ONLY_WORDS or previous not in _EXPRESSION_WORDS:
                return QueryShape(kind, False)
        pieces.append(query[at:match.start()])
        pieces.append(f"{ROW_VARIABLE}.{match.group(1)}")
        at = match.end()
    pieces.append(query[at:])
    return QueryShape(kind, True, f"UNWIND ${ROWS_PARAMETER} AS {ROW_VARIABLE} " + "".join(pieces))


_SHAPES: dict[str, QueryShape] = {}


def _shape(query: str) -> QueryShape:
    shape = _SHAPES.get(query)
    if shape is None:
        if len(_SHAPES) > 1024:
            _SHAPES.clear()
        shape = _SHAPES[query] = query_shape(query)
    return shape


def unwind_statements(statements: Sequence[Statement]) -> list[Statement]:
    """One batch's statements as UNWIND batches: grouped by query text, node groups before
    relationship groups, barriers kept in place (see the module docstring)."""
    out: list[Statement] = []
    segment: list[Statement] = []
    for statement in statements:
        if _shape(statement.query).kind is WriteKind.BARRIER:
            out.extend(_unwind_segment(segment))
            segment = []
            out.append(statement)
        else:
            segment.append(statement)
    out.extend(_unwind_segment(segment))
    return out


def _unwind_segment(segment: list[Statement]) -> list[Statement]:
    if not segment:
        return []
    groups: dict[str, list[Statement]] = {}
    for statement in segment:
        groups.setdefault(statement.query, []).append(statement)
    ordered = sorted(groups.items(), key=lambda item: _shape(item[0]).kind is WriteKind.RELATIONSHIP)
    out: list[Statement] = []
    for query, members in ordered:
        shape = _shape(query)
        if shape.unwindable and len(members) > 1:
            out.append(Statement(shape.unwound, {ROWS_PARAMETER: [dict(s.parameters) for s in members]}))
        else:
            out.extend(members)
    return out


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


class PrepareStatus(Enum):
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
