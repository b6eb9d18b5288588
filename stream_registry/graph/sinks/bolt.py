"""`bolt://host[:7687]`, `bolt+s://…` and `bolt+ssc://…`: batches written over Bolt 5 through the neo4j driver
(bolt_driver.py), one transaction per batch, transient failures retried (`?retries=5`).

bolt+s verifies the server certificate against the system CAs and the host name, as a browser does, in the
driver's own TLS handshake; bolt+ssc is TLS to a self-signed server (any certificate: encryption only). Both
take `?fingerprint=<hex>` to pin the server key (bolt_driver.PinnedContext). Credentials come from the stream's
credentials map (`bolt.username`, `bolt.password`), never from the URI; the password never appears in a repr or
an error. `?engine=falkordb` adapts the writes to FalkorDB (bolt_driver.Engine: no transactions there).
"""
from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...addresses import Host, authority
from ...errors import ConfigError, SinkError
from ...model import PartitionKey
from ...redaction import MASK, redact
from ..offset_store import (
    READ_MARKS_QUERY,
    READ_QUERY,
    Continuation,
    change_as_one_statement,
    continuation,
    offsets_in_statements,
    stored_in_rows,
)
from ..parameter_values import driver_parameters
from ..sink_faults import is_refusal, is_server_answer, is_transient
from ..statement import Statement
from ..unwind import fold
from .bolt_driver import Engine, connect_driver, inline_parameters
from .protocol import Closing, Written
from .tls import normal_fingerprint
from .uri import PASSWORD_KEY, USERNAME_KEY, check_options, shown_uri

DEFAULT_BOLT_PORT = 7687


@dataclass(frozen=True)
class BoltSettings:
    scheme: str
    host: str
    port: int
    fingerprint: str | None = None
    retries: int = 5
    unwind: bool = True      # fold runs of one query text into UNWIND statements (unwind.py)
    address: Host | None = None   # the parsed host the allowlist judges; `host` is its name
    engine: Engine = Engine.MEMGRAPH


@dataclass(frozen=True)
class PreparedWrite:
    """BoltSink.prepare's result: the statements as they are sent, the offsets they end in (exactly-once), and
    how many statements they were made of."""
    statements: tuple[tuple[str, Mapping[str, Any]], ...]
    end: dict[tuple[str, str, int], int]
    count: int


class _Secret:
    """Holds a password so that repr(), vars() and logs show the mask instead."""

    __slots__ = ("_value",)

    def __init__(self, value: str | None):
        self._value = value

    def reveal(self) -> str | None:
        return self._value

    def __repr__(self) -> str:
        return MASK if self._value else "None"


class BoltSink(Closing):
    """Writes each batch in one transaction through the neo4j driver (bolt_driver).

    Connects on the first write. A transient failure (sink_faults: by the
    error's type, or a driver error that left the session broken) rolls back,
    drops the connection and retries the whole batch with exponential backoff
    (at most `retries` attempts in all); anything else, or the last failure, is
    a SinkError.

    An exactly-once batch (ending in offset statements) first reads the stored
    offsets in its own transaction: if they already are the batch's end
    offsets it writes nothing. So a commit whose outcome is unknown (the
    connection dropped during commit(): applied or not) is resolved by that
    read on the next attempt, never by writing the batch blindly again. With
    `expect`, the read is a compare-and-set (offset_store.continuation).

    With `unwind` (the default), runs of statements of one query text are sent
    as one UNWIND statement each (unwind.fold): one round trip per run. An
    at-least-once batch that folds into one statement runs in autocommit, a
    transaction of its own: one round trip, not three (BEGIN, it, COMMIT).

    On an engine without transactions (Engine.FALKORDB) each statement applies
    when it runs: a batch that fails part-way leaves the statements before the
    failing one, and its offsets (the batch's last statements) unwritten, so
    its retry applies it again from the start. Exactly-once there holds for
    batches whose statements are idempotent (MERGE ... SET); a CREATE of a
    batch that failed part-way is written twice (docs: exactly-once).
    """

    def __init__(self, host: str, port: int = DEFAULT_BOLT_PORT, *, scheme: str = "bolt",
                 username: str | None = None, password: str | None = None, fingerprint: str | None = None,
                 retries: int = 5, backoff_s: float = 0.1, max_backoff_s: float = 2.0,
                 connect: Callable[..., Any] | None = None, sleep: Callable[[float], None] = time.sleep,
                 unwind: bool = True, engine: Engine = Engine.MEMGRAPH):
        self.scheme, self.host, self.port = scheme, host, port
        self.unwind = unwind
        self.engine = engine
        self.username = username
        self._password = _Secret(password)
        self.fingerprint = normal_fingerprint(fingerprint) if fingerprint else None
        self.retries, self.backoff_s, self.max_backoff_s = max(1, retries), backoff_s, max_backoff_s
        self._connect_fn, self._sleep = connect, sleep
        self._conn: Any = None   # a bolt_driver.BoltConnection once connected
        self._lock = threading.Lock()
        self.batches = 0
        self.attempts = 0
        self.unknown_commits = 0   # commits whose outcome was unknown, resolved by reading the stored offsets

    def write(self, statements: Sequence[Statement], *,
              expect: Mapping[PartitionKey, int | None] | None = None) -> Written:
        if not statements:
            return Written.APPLIED
        return self.write_prepared(self.prepare(statements), expect=expect)

    def prepare(self, statements: Sequence[Statement]) -> PreparedWrite:
        """The client's share of a write of `statements`, made before any round trip: their parameters as the
        driver takes them, runs of one query text folded (`unwind`), and on FalkorDB the parameters rendered into
        the query text (bolt_driver.inline_parameters: a SinkError naming a value it cannot carry).
        write_prepared sends it; a stream writing behind (write_behind.py) prepares the next batch meanwhile."""
        end = offsets_in_statements(statements)
        if not self.engine.transactions:   # an offset change's mark never without its offsets (offset_store)
            statements = change_as_one_statement(statements)
        work = [(s.query, driver_parameters(s.parameters, index)) for index, s in enumerate(statements)]
        runs: list[tuple[str, Mapping[str, Any]]] = fold(work) if self.unwind else list(work)
        if self.engine is Engine.FALKORDB:
            runs = [(inline_parameters(query, parameters), {}) for query, parameters in runs]
        return PreparedWrite(tuple(runs), end, len(work))

    def write_prepared(self, prepared: PreparedWrite, *,
                       expect: Mapping[PartitionKey, int | None] | None = None) -> Written:
        """Send a prepared write: one transaction, retried as the class docstring says."""
        end = prepared.end
        unknown = False   # a commit of this batch failed in flight: it may have been applied
        # an at-least-once batch of one statement runs as a transaction of its own (autocommit): as atomic as
        # BEGIN, the statement and COMMIT, in one round trip instead of three
        single = not end and len(prepared.statements) == 1 and self.engine.transactions
        with self._lock:
            for attempt in range(1, self.retries + 1):
                self.attempts += 1
                committing = False
                try:
                    conn = self._connection()
                    cursor = conn.cursor()
                    if end:
                        stored = self._stored_in_transaction(cursor, {stream for stream, _, _ in end})
                        unknown = False   # resolved by what is stored
                        if continuation(stored, end, expect) is Continuation.DONE:
                            conn.rollback()
                            return Written.ALREADY_APPLIED
                    if single:
                        committing = True
                        self._run_alone(conn, cursor, *prepared.statements[0])
                    else:
                        for query, parameters in prepared.statements:
                            cursor.execute(query, parameters)
                        committing = True
                        conn.commit()
                    self.batches += 1
                    return Written.APPLIED
                except SinkError:
                    self._abandon()
                    raise
                except Exception as exc:
                    transient = self._lost(exc)
                    self._abandon()
                    if committing and transient and not (single and is_server_answer(exc)):
                        self.unknown_commits += 1   # applied or not: the next attempt reads the offsets first
                        unknown = True
                    if attempt == self.retries or not transient:
                        raise self._failure(prepared.count, attempt, exc, transient, unknown) from None
                self._sleep(min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s))
        raise AssertionError("unreachable")

    def _run_alone(self, conn, cursor, query: str, parameters: Mapping[str, Any]) -> None:
        """One statement in a transaction of its own; the connection back to explicit transactions after (a
        connection that cannot go back is dropped: the next call connects afresh; what ran stays run)."""
        conn.autocommit = True
        try:
            cursor.execute(query, parameters)
        finally:
            if self._conn is conn:
                try:
                    conn.autocommit = False
                except Exception:
                    self._abandon()

    def _stored_in_transaction(self, cursor, streams: set[str]) -> dict[tuple[str, str, int], int]:
        stored: dict[tuple[str, str, int], int] = {}
        for stream in sorted(streams):
            cursor.execute(READ_QUERY, {"stream": stream})
            stored.update(stored_in_rows(stream, cursor.fetchall()))
        return stored

    def stored_offsets(self, stream: str, partitions: Iterable[PartitionKey] | None = None
                       ) -> dict[PartitionKey, int]:
        """The stream's stored offsets, read in a transaction of their own. SinkError on failure, transient when
        the connection or a timeout failed (retry it: see read_stored_offsets_within)."""
        return self._read_by_partition(READ_QUERY, stream, partitions, "the stored offsets")

    def stored_marks(self, stream: str, partitions: Iterable[PartitionKey] | None = None
                     ) -> dict[PartitionKey, str]:
        """The change marks stored beside the offsets (offset_store.MARK_QUERY), read as stored_offsets is."""
        return self._read_by_partition(READ_MARKS_QUERY, stream, partitions, "the stored change marks")

    def _read_by_partition(self, query: str, stream: str, partitions: Iterable[PartitionKey] | None,
                           what: str) -> dict[PartitionKey, Any]:
        with self._lock:
            try:
                conn = self._connection()
                cursor = conn.cursor()
                cursor.execute(query, {"stream": stream})
                rows = cursor.fetchall()
                conn.commit()
            except SinkError:
                raise
            except Exception as exc:
                transient = self._lost(exc)
                self._abandon()
                raise SinkError(f"sink {self._where()}: reading {what} failed: "
                                f"{redact(f'{type(exc).__name__}: {exc}', self._secrets())}",
                                transient=transient) from None
        wanted = set(partitions) if partitions is not None else None
        return {PartitionKey(topic, partition): value for topic, partition, value in rows
                if wanted is None or (topic, partition) in wanted}

    def _lost(self, exc: BaseException) -> bool:
        """Transient by its type (sink_faults)."""
        return is_transient(exc)

    def run_autocommit(self, query: str, parameters: Mapping[str, Any] | None = None) -> None:
        """Run one statement in a transaction of its own (autocommit) on this sink's connection (TLS and
        credentials as for writes): for what Memgraph refuses inside a multi-statement transaction, such
        as CREATE INDEX and CREATE CONSTRAINT. Not retried. SinkError when the connection cannot be made
        (saying so), or naming the statement with the server's message; the next write is one
        transaction per batch again."""
        secrets = self._secrets()
        with self._lock:
            conn = self._connected()
            try:
                self._run_alone(conn, conn.cursor(), query, driver_parameters(parameters or {}, 0))
            except Exception as exc:
                if self._lost(exc):
                    self._abandon()   # a lost connection: the next call connects afresh
                raise SinkError(f"sink {self._where()}: {query!r} failed: "
                                f"{redact(f'{type(exc).__name__}: {exc}', secrets)}") from None

    def check(self) -> None:
        """Connect (TCP, the Bolt handshake, the login) and close again: what create checks before it stores a
        stream. SinkError naming the sink and why, when that fails."""
        with self._lock:
            self._connected()
        self.close()

    def _connected(self):
        """The connection (made if need be, under the lock); SinkError saying the sink cannot be reached."""
        try:
            return self._connection()
        except SinkError:
            raise
        except Exception as exc:
            self._abandon()
            raise SinkError(f"sink {self._where()}: cannot connect: "
                            f"{redact(f'{type(exc).__name__}: {exc}', self._secrets())}") from None

    def _connection(self):
        if self._conn is None:
            password = self._password.reveal() or "" if self.username is not None else None
            conn = (self._connect_fn or connect_driver)(
                host=self.host, port=self.port, scheme=self.scheme, username=self.username, password=password,
                fingerprint=self.fingerprint, engine=self.engine)
            conn.autocommit = False
            self._conn = conn
        return self._conn

    def _abandon(self) -> None:
        """After a failure: roll back what the server may hold, then start afresh next time."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        for step in (conn.rollback, conn.close):
            try:
                step()
            except Exception:
                pass

    def _failure(self, count: int, attempts: int, exc: Exception, transient: bool, unknown: bool = False
                 ) -> SinkError:
        detail = redact(f"{type(exc).__name__}: {exc}", self._secrets())
        kind = "transient " if transient else ""
        outcome = ("may have been applied (its commit's outcome is unknown; an exactly-once batch's next write "
                   "reads the stored offsets first)" if unknown else "was not applied")
        return SinkError(f"sink {self._where()}: a batch of {count} statements {outcome} after "
                         f"{attempts} attempt(s), {kind}error {detail}", transient=transient,
                         rejected=not transient and is_refusal(exc))

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                try:
                    conn.close()
                except Exception:
                    pass

    def _secrets(self) -> list[str]:
        return [s for s in (self._password.reveal(),) if s]

    def _where(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def __repr__(self) -> str:
        user = f", user={self.username!r}" if self.username is not None else ""
        return f"BoltSink({self._where()!r}{user}, password={self._password!r})"




def parse_bolt(parts: Any, query: dict[str, str], uri: str) -> BoltSettings:
    scheme = parts.scheme.lower()
    check_options(query, {"retries", "engine"} if scheme == "bolt" else {"retries", "fingerprint", "engine"}, uri)
    if not parts.netloc or parts.path not in ("", "/"):
        raise ConfigError(f"sink: expected {scheme}://host[:port], got {shown_uri(uri)!r}")
    # the one parse of the host: the allowlist judges this value and the sink connects to this value
    address, port = authority("sink", parts.netloc, shown_uri(uri))
    host, port = address.name, port or DEFAULT_BOLT_PORT
    retries = query.get("retries", "5")
    if not retries.isdigit() or not 1 <= int(retries) <= 100:
        raise ConfigError(f"sink: option retries={retries!r} in {shown_uri(uri)!r} is not in 1..100")
    fingerprint = query.get("fingerprint")
    if fingerprint is not None and not re.fullmatch(r"[0-9A-Fa-f:]{16,}", fingerprint):
        raise ConfigError(f"sink: option fingerprint={fingerprint!r} in {shown_uri(uri)!r} is not hex")
    engine = query.get("engine", Engine.MEMGRAPH.value)
    if engine not in {e.value for e in Engine}:
        raise ConfigError(f"sink: option engine={engine!r} in {shown_uri(uri)!r} is not one of "
                          f"{', '.join(e.value for e in Engine)}")
    return BoltSettings(scheme, host, port, fingerprint, int(retries), address=address, engine=Engine(engine))


def open_bolt(settings: BoltSettings, credentials: Mapping[str, str]) -> BoltSink:
    username = credentials.get(USERNAME_KEY)
    password = credentials.get(PASSWORD_KEY)
    if password is not None and username is None:
        raise ConfigError(f"credentials: {PASSWORD_KEY!r} is set but {USERNAME_KEY!r} is not "
                          f"(sink {settings.scheme}://{settings.host}:{settings.port})")
    return BoltSink(settings.host, settings.port, scheme=settings.scheme, username=username,
                    password=password, fingerprint=settings.fingerprint, retries=settings.retries,
                    unwind=settings.unwind, engine=settings.engine)
