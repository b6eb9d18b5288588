"""A pymgclient stand-in for Bolt sinks: what `mgclient.connect` returns, over a tiny Memgraph.

It runs what the Bolt sink sends, a folded `UNWIND $mgstreams_rows AS mgstreams_row …`
as its rows one by one (mgclient_standin.effective; `transactions` holds the
statements as they took effect): CREATE statements (counted per parameters,
so a test can assert each was applied once), the offset store's MERGE and
MATCH (offset_store.WRITE_QUERY / READ_QUERY), in transactions (autocommit
off: nothing is visible until commit()). Faults are injected as pymgclient
raises them (its exception classes, connection status):

- `drop_after_commit`: the next commits are applied, then the connection is
  lost (pymgclient >= 1.6 raises TransientError; `old_driver=True`: a
  DatabaseError on a connection marked CONN_STATUS_BAD, as before 1.6);
- `drop_before_commit`: the next commits are lost before they reach the
  server (nothing applied), with the same error;
- `down`: connecting fails (OperationalError) and an open connection is lost, as when the server stops;
- `fail_when(query, parameters)`: the statement is refused (DatabaseError), as for a query error.
"""
from __future__ import annotations

import threading
from collections import Counter

import mgclient
from mgclient_standin.mgclient import effective

from stream_registry.graph.offset_store import READ_QUERY, WRITE_QUERY


class Memgraph:
    def __init__(self, *, old_driver: bool = False):
        self.lock = threading.Lock()
        self.offsets: dict[tuple[str, str, int], int] = {}     # committed (stream, topic, partition) -> next
        self.applied: Counter = Counter()                       # committed CREATEs, by their parameters
        self.commits = 0
        self.drop_after_commit = 0
        self.drop_before_commit = 0
        self.down = False
        self.old_driver = old_driver
        self.connections = 0
        self.transactions: list[list[str]] = []                 # the queries of each committed transaction
        self.fail_when = None     # a predicate on (query, parameters): Memgraph refuses it (DatabaseError)

    def connect(self, **kwargs):
        with self.lock:
            if self.down:
                raise mgclient.OperationalError("couldn't connect to host: Connection refused")
            self.connections += 1
        return Connection(self)

    def lost(self, connection: Connection) -> Exception:
        connection.status = mgclient.CONN_STATUS_BAD
        if self.old_driver:
            return mgclient.DatabaseError("failed to receive chunk size: connection reset by peer")
        return mgclient.TransientError("failed to receive chunk size: connection reset by peer")

    def created(self) -> Counter:
        """How many times each CREATE was committed, by (topic, partition, offset) when it has them."""
        with self.lock:
            return Counter({key: n for key, n in self.applied.items()})


class Connection:
    def __init__(self, server: Memgraph):
        self.server = server
        self.autocommit = True
        self.status = mgclient.CONN_STATUS_READY
        self._offsets: dict = {}
        self._created: list = []
        self._queries: list = []

    def cursor(self):
        if self.status == mgclient.CONN_STATUS_BAD:
            raise mgclient.InterfaceError("bad session")
        if self.server.down:            # the server went away under an open connection
            raise self.server.lost(self)
        return Cursor(self)

    def commit(self):
        server = self.server
        if self.status == mgclient.CONN_STATUS_BAD:
            raise mgclient.InterfaceError("bad session")
        with server.lock:
            if server.drop_before_commit:
                server.drop_before_commit -= 1
                self._offsets, self._created, self._queries = {}, [], []
                raise server.lost(self)
            server.offsets.update(self._offsets)
            server.applied.update(self._created)
            server.commits += 1
            if self._queries:
                server.transactions.append(self._queries)
            self._offsets, self._created, self._queries = {}, [], []
            if server.drop_after_commit:
                server.drop_after_commit -= 1
                raise server.lost(self)

    def rollback(self):
        if self.status == mgclient.CONN_STATUS_BAD:
            raise mgclient.InterfaceError("bad session")
        self._offsets, self._created, self._queries = {}, [], []

    def close(self):
        self.status = mgclient.CONN_STATUS_CLOSED


class Cursor:
    def __init__(self, connection: Connection):
        self.connection, self.rows = connection, []

    def execute(self, query, parameters=None):
        connection, server = self.connection, self.connection.server
        if connection.status == mgclient.CONN_STATUS_BAD:
            raise mgclient.InterfaceError("bad session")
        statements = effective(query, parameters or {})   # a folded UNWIND runs as its rows, as in Memgraph
        if server.fail_when and any(server.fail_when(q, p) for q, p in statements):
            raise mgclient.DatabaseError("Query failed: Can't have a null value as a property")   # the whole query
        for query, parameters in statements:
            connection._queries.append(query)
            self._run(query, parameters)
        if connection.autocommit:
            connection.commit()

    def _run(self, query, parameters):
        connection, server = self.connection, self.connection.server
        if query == WRITE_QUERY:
            connection._offsets[(parameters["stream"], parameters["topic"], parameters["partition"])] = \
                parameters["next_offset"]
        elif query == READ_QUERY:
            with server.lock:
                seen = {**server.offsets, **connection._offsets}
            self.rows = [(t, p, o) for (s, t, p), o in seen.items() if s == parameters["stream"]]
        elif query.lstrip().upper().startswith("CREATE"):
            key = (parameters.get("topic"), parameters.get("partition"), parameters.get("offset"))
            connection._created.append(key)
        else:
            raise mgclient.DatabaseError(f"the stand-in does not run {query!r}")

    def fetchall(self):
        return list(self.rows)
