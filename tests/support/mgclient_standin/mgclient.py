"""A Bolt connection stand-in: the connection shape the Bolt sink drives (bolt_driver.BoltConnection: cursor,
execute, fetchall, commit, rollback, close, autocommit; the neo4j driver's error classes) over a small recording
Cypher server. It stays for what a real server cannot show (tests/support/graph_server.py is the real one): a
lost acknowledgement (a commit applied whose answer never comes), a torn reply, a write-write conflict on demand,
and round trips counted per transaction.

Two ways to use it:
- in a test's own process, `Server()` and `monkeypatch.setattr(sinks.bolt, "connect_driver", server.connect)`;
- for a stream host and its stream processes, put this directory first on PYTHONPATH (`PYTHONPATH_ENTRY`):
  its sitecustomize.py then points every process's Bolt sink at this module's `connect`, and every process's
  connections share the module's `SERVER`, configured from the environment:
  - `MGCLIENT_STANDIN_RTT_MS`: the time each round trip costs (default 0.2);
  - `MGCLIENT_STANDIN_JOURNAL`: a file that gets one JSON line per committed transaction:
    `{"pid", "round_trips", "executes", "rows", "began", "ended"}` (the times, `time.time()`, of its first
    statement and of its commit's answer), plus `"statements"` with `MGCLIENT_STANDIN_RECORD=rows`; read it
    with `journal_entries` (whole lines only: an append in progress, or one a killed process cut short, is
    not a commit);
  - `MGCLIENT_STANDIN_REJECT`: a statement whose parameters hold a string containing this text fails
    with DatabaseError, as Memgraph fails a whole query on one bad row (in a test's process, any predicate:
    `Server.fail_when`);
  - `MGCLIENT_STANDIN_SHARED=1` (with a journal): the journal is one database for every process that names
    it, as one Memgraph server is for all its clients (without it each process keeps its exactly-once offsets
    in its memory, lost with it). Each line then also carries the transaction's offset writes (`"offsets"`:
    [stream, topic, partition, next_offset] rows), a commit is one append made under the journal's lock
    (`<journal>.lock`), so the lines are in commit order across processes and a line is the commit itself:
    a last line without its newline (its process was killed in the middle of the append) is a transaction
    that did not commit, never read, and cut off by the next commit. A transaction reads the offsets
    committed when it began (Memgraph's snapshot isolation), and an offset write to a partition another
    transaction committed since fails the transaction with TransientError ("Cannot resolve conflicting
    transactions", Memgraph's write-write conflict; checked again at commit).

What the server understands of Cypher is what the tests look at: it runs
`UNWIND $list AS v <query>` over a list of maps as one execution of `<query>`
per row, `v.name` read as `$name` (string literals and comments left alone),
and records each row's (query, parameters): the statements as they took
effect, in order. It keeps mgstreams' exactly-once offsets (offset_store's
write and read queries), visible after commit only.

Round trips are counted as pymgclient makes them with autocommit off: BEGIN
before a transaction's first statement, each execute(), COMMIT, ROLLBACK.

The server keeps a transaction log (`transactions`: each committed transaction's statements as they took
effect; `applied`: how many times each CREATE was committed, by its (topic, partition, offset) parameters) and
injects faults as pymgclient raises them (its exception classes, and the connection's status):
- `drop_after_commit = n`: the next n commits are applied, then the connection is lost (pymgclient >= 1.6
  raises TransientError; `Server(old_driver=True)`: DatabaseError on a connection marked CONN_STATUS_BAD, as
  before 1.6);
- `drop_before_commit = n`: the next n commits are lost before they reach the server (nothing applied), with the
  same error;
- `down = True`: connecting fails (OperationalError, "couldn't connect to host") and an open connection is lost,
  as when the server stops;
- `fail_when(query, parameters)`: a true answer refuses the statement (DatabaseError) and the transaction with it,
  as Memgraph fails a whole query on one bad row; an exception instance as the answer is what is raised (a
  scripted server error, e.g. `DatabaseError("Index already exists")`);
- `failures`: what successive execute() calls raise, in order (None: that one succeeds); an error with a true
  `breaks_session` attribute also marks the connection CONN_STATUS_BAD, as pymgclient does when a session is
  lost (before 1.6, with a DatabaseError).
A lost or closed connection refuses everything after (InterfaceError "bad session"), as pymgclient's does.
`log` records every call the driver is asked to make, in order: ("connect",), ("execute", query, parameters,
autocommit) (the connection's autocommit flag at that call), ("commit",), ("rollback",), ("close",); `executed()`
and `count(what)` read it. Each connection keeps its own calls too (`connections[i].log`, i in connect order,
the same entries without the connect), and `sent()` gives each committed transaction as the driver sent it
(UNWINDs still folded), the autocommit ones apart.
A read answers with rows: `answer(when, rows)` scripts the rows of the statements `when(query, parameters)`
picks, as Memgraph answers a MATCH ... RETURN (the offset read is answered from the committed offsets).
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import threading
import time
from collections import Counter

MG_SSLMODE_DISABLE = 0
MG_SSLMODE_REQUIRE = 1
# pymgclient's connection states (mgclient.CONN_STATUS_*, the values of pymgclient 1.x), what `Connection.status`
# reads and the Bolt sink compares
CONN_STATUS_READY, CONN_STATUS_IN_TRANSACTION, CONN_STATUS_EXECUTING, CONN_STATUS_CLOSED, CONN_STATUS_BAD = \
    0, 1, 2, 4, -1
PYTHONPATH_ENTRY = os.path.dirname(os.path.abspath(__file__))

# The offset statements of stream_registry.graph.offset_store, by their text (this module imports nothing of
# the product: it stands for a server).
OFFSET_WRITE = ("MERGE (o:MgstreamsOffset {stream: $stream, topic: $topic, partition: $partition}) "
                "SET o.next_offset = $next_offset")
OFFSET_READ = ("MATCH (o:MgstreamsOffset {stream: $stream}) "
               "RETURN o.topic AS topic, o.partition AS partition, o.next_offset AS next_offset")
# Memgraph's answer to a write-write conflict (a TransientError: the client may retry the transaction)
CONFLICT = ("Cannot resolve conflicting transactions. You can retry this transaction when the conflicting "
            "transaction is finished")


class _FileLock:
    """flock on `<path>.lock`: the shared journal's lock, across processes."""

    def __init__(self, path: str, mode: int):
        self.path, self.mode, self.fd = f"{path}.lock", mode, -1

    def __enter__(self) -> _FileLock:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, self.mode)
        return self

    def __exit__(self, *exc) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


# The errors, as the sink's Bolt client (stream_registry/graph/sinks/bolt_driver.py, the neo4j driver) raises
# them: the same classes the sink classifies in production (sink_faults), under the DB-API names the stand-in
# has always used. A lost or refused connection is the driver's ServiceUnavailable, a session lost before its
# SessionExpired, a server's transient error (a write conflict) its TransientError, a refused statement a
# server error (Neo4jError).
from neo4j import exceptions as _driver  # noqa: E402


class Warning(Exception):  # noqa: A001 - the DB-API name
    pass


class Error(Exception):
    pass


class InterfaceError(_driver.SessionExpired):
    pass


class DatabaseError(_driver.DatabaseError):
    pass


class DataError(DatabaseError):
    pass


class OperationalError(_driver.ServiceUnavailable):
    pass


class IntegrityError(DatabaseError):
    pass


class InternalError(DatabaseError):
    pass


class ProgrammingError(DatabaseError):
    pass


class NotSupportedError(DatabaseError):
    pass


class TransientError(_driver.TransientError):
    pass


_UNWIND = re.compile(r"\s*UNWIND\s+\$([A-Za-z_]\w*)\s+AS\s+([A-Za-z_]\w*)\s+(.*)\Z", re.S | re.I)
_LITERAL = r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|`[^`]*`|//[^\n]*|/\*.*?\*/"""


def effective(query: str, parameters: dict) -> list[tuple[str, dict]]:
    """The statements `query` amounts to, one per row of a top-level UNWIND over maps (see the module docstring);
    the query itself when it is no such UNWIND, or when its rows are used other than as `v.name`."""
    match = _UNWIND.match(query)
    rows = parameters.get(match.group(1)) if match else None
    if not match or not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        return [(query, parameters)]
    variable, inner = match.group(2), match.group(3)
    field = re.compile(rf"({_LITERAL})|(?<![\w.$]){re.escape(variable)}\.([A-Za-z_]\w*)|(?<![\w.$]){variable}\b",
                       re.S)
    names: set[str] = set()
    bare = False

    def swap(m: re.Match) -> str:
        nonlocal bare
        if m.group(1) is not None:
            return m.group(1)
        if m.group(2) is None:
            bare = True
            return m.group(0)
        names.add(m.group(2))
        return "$" + m.group(2)

    unrolled = field.sub(swap, inner)
    if bare or any(set(row) - names for row in rows) or any(names - set(row) for row in rows):
        return [(query, parameters)]
    return [(unrolled, dict(row)) for row in rows]


def _holds(value, text: str) -> bool:
    if isinstance(value, str):
        return text in value
    if isinstance(value, dict):
        return any(_holds(v, text) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds(v, text) for v in value)
    return False


class Server:
    """The state every connection of one process shares: committed offsets and transactions, and the faults
    to inject (see the module docstring)."""

    def __init__(self, rtt_ms: float = 0.2, journal: str | None = None, record_rows: bool = False,
                 reject: str | None = None, *, old_driver: bool = False, shared: bool = False):
        self.rtt_s = rtt_ms / 1000
        # MGCLIENT_STANDIN_SHARED: the journal is the database of every process naming it (its offsets as
        # read up to `_read_to`, the end of its last whole line read)
        self.shared = journal if shared and journal else None
        self._read_to = 0
        self._committed_offsets: dict[tuple[str, str, int], int] = {}
        self.journal, self.record_rows = journal, record_rows
        # a predicate on each statement as it takes effect (query, parameters): True fails the whole statement
        self.fail_when = (lambda query, parameters: _holds(parameters, reject)) if reject else None
        self.offsets: dict[tuple[str, str, int], int] = {}
        # committed: {"round_trips", "executes", "statements" (as they took effect), "sent" (as the driver sent
        # them), "autocommit", "began", "ended"}
        self.transactions: list[dict] = []
        self.applied: Counter = Counter()     # committed CREATEs, by their (topic, partition, offset) parameters
        self.connects: list[dict] = []
        self.connections: list[Connection] = []
        self.answers: list[tuple] = []       # (predicate on (query, parameters), rows), see answer()
        self.log: list[tuple] = []
        self.failures: list[Exception | None] = []
        self.round_trips = 0
        self.commits = 0
        self.drop_after_commit = 0
        self.drop_before_commit = 0
        self.down = False
        self.old_driver = old_driver
        self.lock = threading.Lock()

    @classmethod
    def from_environment(cls) -> Server:
        return cls(float(os.environ.get("MGCLIENT_STANDIN_RTT_MS", "0.2")),
                   os.environ.get("MGCLIENT_STANDIN_JOURNAL") or None,
                   os.environ.get("MGCLIENT_STANDIN_RECORD") == "rows",
                   os.environ.get("MGCLIENT_STANDIN_REJECT") or None,
                   shared=os.environ.get("MGCLIENT_STANDIN_SHARED") == "1")

    def shared_offsets(self) -> dict[tuple[str, str, int], int]:
        """The committed offsets: the shared journal's (MGCLIENT_STANDIN_SHARED) or this process's."""
        if not self.shared:
            with self.lock:
                return dict(self.offsets)
        with _FileLock(self.shared, fcntl.LOCK_SH):
            return self._read_shared()

    def _read_shared(self) -> dict[tuple[str, str, int], int]:
        """The journal's offsets, its whole lines read on from where the last read stopped (under its lock)."""
        with self.lock:
            try:
                with open(self.shared, "rb") as handle:      # type: ignore[arg-type]
                    handle.seek(self._read_to)
                    tail = handle.read()
            except FileNotFoundError:
                tail = b""
            whole = tail[:tail.rfind(b"\n") + 1]
            for line in whole.splitlines():
                for stream, topic, partition, offset in json.loads(line).get("offsets", ()):
                    self._committed_offsets[(stream, topic, partition)] = offset
            self._read_to += len(whole)
            return dict(self._committed_offsets)

    def shared_conflict(self, snapshot: dict, key: tuple[str, str, int]) -> bool:
        """Another transaction committed an offset for `key` since `snapshot` was read."""
        return bool(self.conflicts(snapshot, {key: None}, self.shared_offsets()))

    @staticmethod
    def conflicts(snapshot: dict, writes: dict, now: dict) -> list:
        """The offset keys among `writes` that another transaction committed since `snapshot` was read."""
        return sorted(key for key in writes if now.get(key) != snapshot.get(key))

    def connect(self, **kwargs) -> Connection:
        with self.lock:
            if self.down:
                raise OperationalError("couldn't connect to host: Connection refused")
            self.connects.append(kwargs)
            self.log.append(("connect",))
            connection = Connection(self, len(self.connections))
            self.connections.append(connection)
        return connection

    def answer(self, when, rows: list[tuple]) -> None:
        """Statements for which `when(query, parameters)` is true answer `rows` (what fetchall() returns)."""
        self.answers.append((when, list(rows)))

    def executed(self) -> list[tuple]:
        """(query, parameters) of every execute() call, as the driver was given them."""
        return [entry[1:3] for entry in self.log if entry[0] == "execute"]

    def sent(self, autocommit: bool = False) -> list[list[tuple[str, dict]]]:
        """The committed transactions, in commit order, as the driver sent them: each a list of (query, parameters)
        of its execute() calls (an UNWIND as one). The multi-statement ones, or with `autocommit` the
        statements run in autocommit mode."""
        with self.lock:
            return [list(t["sent"]) for t in self.transactions if t["autocommit"] == autocommit]

    def count(self, what: str) -> int:
        """How many calls of one kind ("connect", "execute", "commit", "rollback", "close") the driver made."""
        return sum(1 for entry in self.log if entry[0] == what)

    def queries(self) -> list[list[str]]:
        """The statements of each committed transaction, as they took effect, without their parameters."""
        with self.lock:
            return [[query for query, _ in t["statements"]] for t in self.transactions]

    def created(self) -> Counter:
        """How many times each CREATE was committed, by (topic, partition, offset) when it has them."""
        with self.lock:
            return Counter(self.applied)

    def lost(self, connection: Connection) -> Exception:
        """The connection is gone: the error pymgclient raises for it, the connection marked bad."""
        connection.status = CONN_STATUS_BAD
        if self.old_driver:
            return DatabaseError("failed to receive chunk size: connection reset by peer")
        return TransientError("failed to receive chunk size: connection reset by peer")

    def statements(self) -> list[tuple[str, dict]]:
        """Every committed statement as it took effect (UNWIND rows one by one), in commit order."""
        return [s for t in self.transactions for s in t["statements"]]

    def _round_trip(self) -> None:
        self.round_trips += 1
        if self.rtt_s > 0:
            time.sleep(self.rtt_s)

    def _committed(self, transaction: dict, offsets: dict, created: list, snapshot: dict | None = None) -> None:
        if self.shared:
            with _FileLock(self.shared, fcntl.LOCK_EX):     # one append: the commit itself, in commit order
                now = self._read_shared()
                if self.conflicts(snapshot or {}, offsets, now):
                    raise TransientError(CONFLICT)
                self._apply(transaction, offsets, created)
            return
        self._apply(transaction, offsets, created)

    def _apply(self, transaction: dict, offsets: dict, created: list) -> None:
        with self.lock:
            self.offsets.update(offsets)
            self.applied.update(created)
            self.commits += 1
            self.transactions.append(transaction)
        if self.journal:
            line = {"pid": os.getpid(), "round_trips": transaction["round_trips"],
                    "executes": transaction["executes"], "rows": len(transaction["statements"]),
                    "began": transaction["began"], "ended": transaction["ended"]}
            if self.record_rows:
                line["statements"] = transaction["statements"]
            if self.shared:
                line["offsets"] = [[*key, offset] for key, offset in sorted(offsets.items())]
            data = (json.dumps(line) + "\n").encode()
            fd = os.open(self.journal, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)   # read: _ends_torn
            try:
                if self.shared:
                    os.ftruncate(fd, self._read_to)     # a torn last line (a killed append) did not commit
                elif _ends_torn(fd):
                    data = b"\n" + data   # after a killed process's torn line: it stays a line of its own
                written = 0
                while written < len(data):
                    written += os.write(fd, data[written:])
            finally:
                os.close(fd)


class Connection:
    def __init__(self, server: Server, number: int = 0):
        self.server = server
        self.number = number                 # its place in connect order (server.connections)
        self.log: list[tuple] = []           # its calls, as the server's log has them
        self.status = CONN_STATUS_READY
        self._autocommit = False
        self._open: dict | None = None       # the transaction in progress
        self._pending: dict = {}             # its offset writes
        self._created: list = []             # its CREATEs
        self._snapshot: dict = {}            # with a shared offsets file: the offsets committed when it began

    @property
    def autocommit(self) -> bool:
        return self._autocommit

    @autocommit.setter
    def autocommit(self, value: bool) -> None:
        if self._open is not None:
            raise InterfaceError("cannot change autocommit property while in a transaction")
        self._autocommit = bool(value)

    def cursor(self) -> Cursor:
        self._usable()
        if self.server.down:            # the server went away under an open connection
            raise self.server.lost(self)
        return Cursor(self)

    def commit(self) -> None:
        self._record(("commit",))
        self._usable()
        if self._open is None:
            return
        server = self.server
        server._round_trip()
        if server.drop_before_commit:
            server.drop_before_commit -= 1
            self._discard()
            raise server.lost(self)
        transaction, offsets, created, snapshot = self._open, self._pending, self._created, self._snapshot
        transaction["round_trips"] += 1
        transaction["ended"] = time.time()
        self._discard()
        server._committed(transaction, offsets, created, snapshot)
        if server.drop_after_commit:
            server.drop_after_commit -= 1
            raise server.lost(self)

    def rollback(self) -> None:
        self._record(("rollback",))
        self._usable()
        if self._open is None:
            return
        self.server._round_trip()
        self._discard()

    def close(self) -> None:
        self._record(("close",))
        self._discard()
        self.status = CONN_STATUS_CLOSED

    def _record(self, entry: tuple) -> None:
        self.server.log.append(entry)
        self.log.append(entry)

    def _usable(self) -> None:
        if self.status == CONN_STATUS_BAD:
            raise InterfaceError("bad session")
        if self.status == CONN_STATUS_CLOSED:
            raise InterfaceError("connection is closed")

    def _discard(self) -> None:
        self._open, self._pending, self._created, self._snapshot = None, {}, [], {}

    def _refusal(self, statements: list[tuple[str, dict]]) -> Exception | None:
        """What the server fails these statements with (`fail_when`), if it does."""
        for query, parameters in statements if self.server.fail_when else ():
            refused = self.server.fail_when(query, parameters)
            if isinstance(refused, Exception):
                return refused
            if refused:
                return DatabaseError("Query failed: Can't have a null value as a property")
        return None

    def _run(self, query: str, parameters: dict) -> list[tuple]:
        self._usable()
        failure = self.server.failures.pop(0) if self.server.failures else None
        if failure is not None:
            if getattr(failure, "breaks_session", False):
                self.status = CONN_STATUS_BAD
            raise failure
        if self._open is None:
            self._open = {"round_trips": 0, "executes": 0, "statements": [], "sent": [],
                          "autocommit": self._autocommit, "began": time.time()}
            if self.server.shared:
                self._snapshot = self.server.shared_offsets()
            if not self._autocommit:
                self.server._round_trip()     # BEGIN
                self._open["round_trips"] += 1
        self.server._round_trip()
        self._open["round_trips"] += 1
        self._open["executes"] += 1
        self._open["sent"].append((query, parameters))
        statements = effective(query, parameters)
        refusal = self._refusal(statements)
        if refusal is not None:
            self._discard()     # Memgraph fails the transaction
            raise refusal
        rows: list[tuple] = []
        for statement, values in statements:
            self._open["statements"].append((statement, values))
            rows += [row for when, answer in self.server.answers if when(statement, values) for row in answer]
            if statement == OFFSET_WRITE:
                key = (values["stream"], values["topic"], values["partition"])
                if self.server.shared and self.server.shared_conflict(self._snapshot, key):
                    self._discard()     # Memgraph fails the transaction on a write-write conflict
                    raise TransientError(CONFLICT)
                self._pending[key] = values["next_offset"]
            elif statement == OFFSET_READ:
                if self.server.shared:
                    seen = {**self._snapshot, **self._pending}
                else:
                    with self.server.lock:
                        seen = {**self.server.offsets, **self._pending}
                rows += [(t, p, o) for (s, t, p), o in sorted(seen.items()) if s == values["stream"]]
            elif statement.lstrip().upper().startswith("CREATE"):
                self._created.append((values.get("topic"), values.get("partition"), values.get("offset")))
        if self._autocommit:
            transaction, offsets, created, snapshot = self._open, self._pending, self._created, self._snapshot
            transaction["ended"] = time.time()
            self._discard()
            self.server._committed(transaction, offsets, created, snapshot)
        return rows


class Cursor:
    def __init__(self, connection: Connection):
        self.connection = connection
        self._rows: list[tuple] = []

    def execute(self, query: str, parameters: dict | None = None) -> None:
        self.connection._record(("execute", query, parameters, self.connection.autocommit))
        self._rows = self.connection._run(query, dict(parameters or {}))

    def fetchall(self) -> list[tuple]:
        rows, self._rows = self._rows, []
        return rows

    def close(self) -> None:
        pass


SERVER = Server.from_environment()


def _ends_torn(fd: int) -> bool:
    """The file does not end with a whole line: an append cut short (its process killed), or one in progress in
    another process (then the newline added before this one's line makes a blank line, which readers skip)."""
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def journal_entries(path) -> list[dict]:
    """The journal's committed transactions, in commit order: its whole lines (a last line without its newline
    is an append still in progress), blank lines skipped, and a torn line (an append its killed process cut
    short: it did not commit) left out."""
    try:
        data = open(path, "rb").read()
    except FileNotFoundError:
        return []
    entries = []
    for line in data[:data.rfind(b"\n") + 1].splitlines():
        if line.strip():
            try:
                entries.append(json.loads(line))
            except ValueError:
                continue
    return entries


def connect(**kwargs) -> Connection:
    return SERVER.connect(**kwargs)
