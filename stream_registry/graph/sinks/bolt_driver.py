"""The Bolt 5 client of the Bolt sink: the neo4j Python driver (the client Memgraph documents for Python),
behind the small connection shape the sink uses (`cursor().execute/fetchall`, `commit`, `rollback`, `close`,
`autocommit`), and what each graph engine needs of it.

Engines (the sink URI's `?engine=`):
- `memgraph` (the default): parameters go as Bolt values; a batch is one explicit transaction (BEGIN, its
  statements, COMMIT), rolled back whole on failure.
- `falkordb`: FalkorDB's Bolt module (4.16) differs where it matters, each difference a test in
  tests/integration/test_graph_engine.py:
  - it has no transactions: BEGIN, COMMIT and ROLLBACK answer SUCCESS and do nothing, every statement applies
    when it runs. So statements run one by one (autocommit) and `commit`/`rollback` do nothing: what a failed
    batch leaves is the statements that ran before the failing one (BoltSink says so);
  - it prints Bolt parameters into the query text (strings unescaped, floats with six decimals) through a
    4096-byte stack buffer, which a larger batch overflows (the server dies). So parameters are sent in the
    query text instead, as FalkorDB's own `CYPHER name=value ...` prefix with literals rendered here;
  - a client's GOODBYE, which the driver sends on close, wedges the server's event loop. So connections to it
    are closed without one (the driver's own `kill`), also when a connection is dropped unclosed (the driver's
    destructors would say GOODBYE: a finalizer kills its connections first).
"""
from __future__ import annotations

import hashlib
import re
import ssl
import weakref
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from ...errors import SinkError
from ..cypher_literals import to_cypher_literal
from .tls import normal_fingerprint, public_key_bits

CONNECT_TIMEOUT_S = 10.0
PINNED_MISMATCH = "is not the pinned fingerprint"
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Engine(StrEnum):
    MEMGRAPH = "memgraph"
    FALKORDB = "falkordb"

    @property
    def transactions(self) -> bool:
        """Whether the engine rolls back an explicit transaction (see the module docstring)."""
        return self is Engine.MEMGRAPH


class PinnedContext(ssl.SSLContext):
    """A TLS context that also holds the server to one key: after the handshake, the SHA-512 of the
    certificate's subjectPublicKey bits (tls.py) must be `fingerprint`, or the socket is closed."""

    fingerprint: str | None = None

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:  # type: ignore[override]
        sock = super().wrap_socket(*args, **kwargs)
        if self.fingerprint:
            key = hashlib.sha512(public_key_bits(sock.getpeercert(binary_form=True) or b"")).hexdigest()
            if key != self.fingerprint:
                sock.close()
                raise ssl.SSLError(f"the server's key fingerprint {key[:16]}... {PINNED_MISMATCH} "
                                   f"{self.fingerprint[:16]}...")
        return sock


def tls_context(scheme: str, fingerprint: str | None) -> PinnedContext | None:
    """bolt: none; bolt+s: the system CAs and the host name, as a browser checks them; bolt+ssc: any
    certificate (encryption only). Either TLS scheme with `fingerprint`: that key and no other."""
    if scheme == "bolt":
        return None
    context = PinnedContext(ssl.PROTOCOL_TLS_CLIENT)
    if scheme == "bolt+s":
        context.load_default_certs()
    else:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    context.fingerprint = normal_fingerprint(fingerprint) if fingerprint else None
    return context


def connect_driver(*, host: str, port: int, scheme: str = "bolt", username: str | None = None,
                   password: str | None = None, fingerprint: str | None = None,
                   engine: Engine = Engine.MEMGRAPH, timeout_s: float = CONNECT_TIMEOUT_S) -> BoltConnection:
    """Connect (TCP, TLS, the Bolt handshake and the login) and return the connection. The driver boundary:
    tests replace `bolt.connect_driver` (where BoltSink looks it up) to see exactly what it receives."""
    import neo4j

    auth = (username, password or "") if username is not None else None
    config: dict[str, Any] = {"max_connection_pool_size": 1, "connection_timeout": timeout_s,
                              "connection_acquisition_timeout": timeout_s, "user_agent": "mgstreams"}
    context = tls_context(scheme, fingerprint)
    if context is not None:
        config["ssl_context"] = context
    driver = neo4j.GraphDatabase.driver(f"bolt://{_host_part(host)}:{port}", auth=auth, **config)
    connection = BoltConnection(driver, engine)
    try:
        driver.verify_connectivity()
    except BaseException as exc:
        connection.close()
        refusal = _tls_refusal(exc, f"{scheme}://{host}:{port}")
        if refusal is not None:
            raise refusal from None
        raise
    return connection


def _tls_refusal(exc: BaseException, where: str) -> SinkError | None:
    """A TLS refusal (an untrusted certificate, a key that is not the pinned one) as a SinkError that is not
    retried, found among the causes the driver chains (it reports them as ServiceUnavailable)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return SinkError(f"sink {where}: the server's certificate is not trusted: "
                             f"{seen.verify_message or seen} (bolt+s verifies it against the system CAs and the "
                             f"host name; for a server with a self-signed certificate use bolt+ssc://, with "
                             f"?fingerprint= to pin its key)")
        if isinstance(seen, ssl.SSLError) and PINNED_MISMATCH in str(seen):
            return SinkError(f"sink {where}: {seen.args[0]}")
        seen = seen.__cause__ or seen.__context__
    return None


def _host_part(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class BoltConnection:
    """One driver session. With `autocommit` false (the sink's writes), the first statement begins a
    transaction that `commit` or `rollback` ends; on an engine without transactions every statement runs on
    its own and `commit`/`rollback` do nothing."""

    def __init__(self, driver: Any, engine: Engine):
        self._driver = driver
        self.engine = engine
        self.autocommit = False
        self._session: Any = None
        self._tx: Any = None
        # On FalkorDB, a connection that is never closed must not say GOODBYE either: the driver's destructors
        # (of the driver and of each pooled connection) close with one. This kills them first, when this object
        # is collected or at the interpreter's exit, whichever comes first (and at close()).
        self._kill = weakref.finalize(self, kill_connections, driver) if engine is Engine.FALKORDB else None

    def cursor(self) -> Cursor:
        return Cursor(self)

    def _run(self, query: str, parameters: Mapping[str, Any]) -> list[tuple]:
        if self.engine is Engine.FALKORDB:
            query, parameters = inline_parameters(query, parameters), {}
        if self._session is None:
            self._session = self._driver.session()
        if self.autocommit or not self.engine.transactions:
            result = self._session.run(query, parameters)
        else:
            if self._tx is None:
                self._tx = self._session.begin_transaction()
            result = self._tx.run(query, parameters)
        return [tuple(row) for row in result.values()]

    def commit(self) -> None:
        tx, self._tx = self._tx, None
        if tx is not None:
            tx.commit()

    def rollback(self) -> None:
        tx, self._tx = self._tx, None
        if tx is not None:
            tx.rollback()

    def close(self) -> None:
        """Close the session and the driver; on FalkorDB without GOODBYE (module docstring)."""
        self._tx = None
        session, self._session = self._session, None
        try:
            if self._kill is not None:
                self._kill()   # first: the session and the driver then find them closed
            if session is not None:
                session.close()
        finally:
            self._driver.close()


class Cursor:
    __slots__ = ("_connection", "_rows")

    def __init__(self, connection: BoltConnection):
        self._connection = connection
        self._rows: list[tuple] = []

    def execute(self, query: str, parameters: Mapping[str, Any] | None = None) -> None:
        self._rows = self._connection._run(query, parameters or {})

    def fetchall(self) -> list[tuple]:
        rows, self._rows = self._rows, []
        return rows


def kill_connections(driver: Any) -> None:
    """Close a neo4j driver's pooled connections without GOODBYE (the driver's own `kill`)."""
    pool = getattr(driver, "_pool", None)
    if pool is None:
        return
    with pool.lock:
        connections = [connection for queue in pool.connections.values() for connection in queue]
    for connection in connections:
        connection.kill()


def inline_parameters(query: str, parameters: Mapping[str, Any]) -> str:
    """`query` with its parameters in FalkorDB's own prefix, `CYPHER name=<literal> ... query`: nothing left
    for its Bolt module to print (module docstring). SinkError naming a value it cannot carry.

    Rendered by `_fast` (no value's name made unless one fails: a batch's rows are most of a sink's client
    time on this engine, bench/bolt_driver_cost.py); a value it cannot render is rendered again by `_literal`,
    which names it in the error."""
    if not parameters:
        return query
    try:
        prefix = " ".join([f"{name}={_fast(value)}" for name, value in parameters.items()])
    except SinkError:
        prefix = " ".join([f"{name}={_literal(value, f'${name}')}" for name, value in parameters.items()])
    return "CYPHER " + prefix + " " + query


_KEYS: dict[Any, str] = {}   # map keys as rendered (a batch's rows repeat a handful of keys)
_INT_RANGE = range(-(2 ** 63) + 1, 2 ** 63)   # int64 but its minimum (cypher_literals writes that one apart)


def _fast(value: Any) -> str:
    """_literal's rendering of `value`, by exact type first; SinkError (unnamed) where _literal would refuse."""
    kind = type(value)
    if kind is str:
        if "\x00" in value:
            raise SinkError("NUL")
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if kind is int and value in _INT_RANGE:
        return str(value)
    if kind is dict:
        return "{" + ", ".join([f"{_KEYS.get(k) or _new_key(k)}: {_fast(v)}" for k, v in value.items()]) + "}"
    if kind is list or kind is tuple:
        return "[" + ", ".join([_fast(v) for v in value]) + "]"
    if value is None:
        return "null"
    if isinstance(value, (str, Mapping, list, tuple)):   # a subclass: as _literal renders it
        return _literal(value, "value")
    return to_cypher_literal(value)


def _new_key(key: Any) -> str:
    rendered = _key(key)
    if type(key) is str and len(_KEYS) < 4096:   # str only: 1 and True are one dict key, not one name
        _KEYS[key] = rendered
    return rendered


def _key(key: Any) -> str:
    text = str(key)
    return text if _PLAIN_NAME.fullmatch(text) else "`" + text.replace("`", "``") + "`"


def _literal(value: Any, name: str) -> str:
    """A Cypher literal as FalkorDB reads it: its strings take `\\\\` and `\\"` but no `\\uXXXX` (they keep it as
    text), so every other character goes as it is; NUL ends its C strings, so a string holding one is refused."""
    if isinstance(value, str):
        if "\x00" in value:
            raise SinkError(f"parameter {name}: a string holding NUL (U+0000), which FalkorDB cannot store")
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_key(k)}: {_literal(v, f'{name}.{k}')}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(v, f"{name}[{i}]") for i, v in enumerate(value)) + "]"
    return to_cypher_literal(value, name)
