"""Contract tests of `query_modules/streams.py` on Memgraph's real mgp.py, against a real stream host.

The module is loaded the way Memgraph loads it (tests/support/mgp_backend), procedures
are CALLed through mgp's own wrappers with Cypher-typed arguments, and the
records come back as a client sees them. Every call crosses the process
boundary to a `mgstreams serve` child process (the `host` fixture), which is
where the streams run. The scenarios of Memgraph's own stream offset test
(tests/e2e/streams: set to 10, -1, -2, unknown stream) run here on
multi-partition topics of the embedded Kafka cluster; Memgraph's module reload
(`mg.load`, `mg.load_all`, with their sys.modules purge) must not duplicate a
stream, and the module's process must stay free of Kafka clients and threads.
"""
from __future__ import annotations

import datetime
import http.server
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest
from broker_support import QUICK_FIRST_JOIN
from configs import MERGE
from host_helpers import HostProcess
from mgclient_standin import mgclient as standin
from mgp_backend import QUERY_MODULES, mgp_environment, query_modules
from paths import ROOT, SUPPORT
from ports import free_port
from stream_helpers import FAST_REJOIN, SETTLED_MS, by_partition, delivered_from_file, wait_until

SINK_ENV = "MGSTREAMS_DEFAULT_SINK"
NO_TOKEN = ("Exception: authorization: a valid bearer token is required (Authorization: Bearer ...): set "
            "MGSTREAMS_TOKEN or MGSTREAMS_TOKEN_FILE (the host's token file, <its state dir>/api-token when it "
            "generated one) in Memgraph's environment")

SIGNATURES = {
    "streams.create": (
        'streams.create(name :: STRING, topics :: LIST OF STRING, bootstrap_servers :: STRING, '
        'transform = "" :: STRING, sink = "bolt://localhost:7687" :: STRING, consumer_group = "" :: STRING, '
        'batch_size = 1000 :: INTEGER, batch_interval_ms = 100 :: INTEGER, configs = {} :: MAP, '
        'credentials = {} :: MAP, restart = "on-failure" :: STRING, options = {} :: MAP) '
        ':: (name :: STRING, status :: STRING)'),
    "streams.alter": "streams.alter(name :: STRING, changes :: MAP) :: (name :: STRING, status :: STRING)",
    "streams.start": "streams.start(name :: STRING) :: (name :: STRING, status :: STRING)",
    "streams.stop": "streams.stop(name :: STRING) :: (name :: STRING, status :: STRING)",
    "streams.drop": "streams.drop(name :: STRING) :: (name :: STRING, status :: STRING)",
    "streams.list": (
        "streams.list() :: (batch_interval_ms :: INTEGER, batch_size :: INTEGER, bootstrap_servers :: STRING, "
        "configs :: MAP, consumer_group :: STRING, "
        "credentials :: MAP, dead_letter_topic :: STRING?, dead_lettered :: INTEGER, delivery :: STRING, "
        "detail :: STRING?, error :: STRING?, errors_tolerance :: STRING, name :: STRING, pid :: INTEGER?, "
        "pids :: LIST OF INTEGER, restart :: STRING, "
        "restarts :: INTEGER, rss_bytes :: INTEGER?, sink :: STRING, skipped :: INTEGER, status :: STRING, "
        "tasks :: INTEGER, topics :: LIST OF STRING, transform :: STRING)"),
    "streams.set_stream_offset": (
        "streams.set_stream_offset(name :: STRING, offset :: ANY, timeout_ms = 10000 :: INTEGER, "
        "dry_run = false :: BOOLEAN) :: (message :: STRING, offset :: INTEGER?, partition :: INTEGER, "
        "previous_offset :: INTEGER?, status :: STRING, topic :: STRING)"),
    "streams.offsets": (
        "streams.offsets(name :: STRING) :: (assigned :: BOOLEAN, committed_offset :: INTEGER?, "
        "lag :: INTEGER?, log_end_offset :: INTEGER, log_start_offset :: INTEGER, partition :: INTEGER, "
        "position :: INTEGER?, resume_offset :: INTEGER?, stored_offset :: INTEGER?, task :: INTEGER?, "
        "topic :: STRING)"),
    "streams.lag": (
        "streams.lag(name :: STRING) :: (lag :: INTEGER?, lag_seconds :: FLOAT?, message :: STRING, "
        "partition :: INTEGER, status :: STRING, topic :: STRING)"),
    "streams.health": (
        "streams.health() :: (max_lag_seconds :: FLOAT?, name :: STRING, records_per_second :: FLOAT, "
        "status :: STRING, total_lag :: INTEGER?)"),
    "streams.history": (
        "streams.history(name :: STRING) :: (change_id :: INTEGER, changed_at :: LOCAL_DATE_TIME, "
        "message :: STRING?, offset :: INTEGER, partition :: INTEGER, previous_offset :: INTEGER?, status :: STRING, "
        "topic :: STRING)"),
    "streams.revert": (
        "streams.revert(name :: STRING, change_id :: INTEGER, timeout_ms = 10000 :: INTEGER, "
        "dry_run = false :: BOOLEAN, partitions = Null :: LIST? OF ANY) :: (message :: STRING, offset :: INTEGER?, "
        "partition :: INTEGER, "
        "previous_offset :: INTEGER?, status :: STRING, topic :: STRING)"),
    "streams.pending": (
        "streams.pending(name :: STRING, cancel = false :: BOOLEAN) :: (message :: STRING?, offset :: INTEGER, "
        "partition :: INTEGER, previous_offset :: INTEGER?, requested_at :: LOCAL_DATE_TIME, topic :: STRING)"),
    "streams.check": (
        'streams.check(name :: STRING, offset = "committed" :: ANY, limit = 10 :: INTEGER) :: (error :: STRING?, '
        "offset :: INTEGER, parameters :: MAP, partition :: INTEGER, query :: STRING, topic :: STRING)"),
}

# One call of every procedure, for checks that must hold whatever is called.
EVERY_CALL = [("streams.create", ("s", ["t"], "localhost:9092")), ("streams.start", ("s",)),
              ("streams.alter", ("s", {"batch_size": 5})), ("streams.stop", ("s",)), ("streams.drop", ("s",)),
              ("streams.list", ()),
              ("streams.set_stream_offset", ("s", 10)), ("streams.offsets", ("s",)), ("streams.history", ("s",)),
              ("streams.revert", ("s", 1)), ("streams.pending", ("s",)), ("streams.pending", ("s", True)),
              ("streams.check", ("s",))]


@pytest.fixture(scope="module")
def memgraph():
    """One server for the module, loaded with $MGSTREAMS_DEFAULT_SINK unset (SIGNATURES shows the default)."""
    with query_modules() as server:
        yield server


@pytest.fixture
def connected(host, monkeypatch):
    """The module talks to a fresh host child process (found through $MGSTREAMS_URL, no token)."""
    monkeypatch.setenv("MGSTREAMS_URL", host.url)
    monkeypatch.delenv("MGSTREAMS_TOKEN", raising=False)
    return host


@pytest.fixture
def bolt_connected(tmp_path, monkeypatch):
    """`connected`, to a host whose Bolt sinks answer: it imports the pymgclient stand-in as `mgclient` (create
    connects and logs in to a Bolt sink before it stores the stream)."""
    host = HostProcess(tmp_path / "state", env={
        "PYTHONPATH": os.pathsep.join((standin.PYTHONPATH_ENTRY, str(SUPPORT), str(ROOT)))}).start()
    monkeypatch.setenv("MGSTREAMS_URL", host.url)
    monkeypatch.delenv("MGSTREAMS_TOKEN", raising=False)
    yield host
    host.stop()


def create(memgraph, name, topic, bootstrap, out: Path, **options):
    # A group of its own: on the embedded cluster a group whose member stopped takes ~44 s to rebalance.
    # QUICK_FIRST_JOIN: on Tansu a group's first join waits half the session timeout (see broker_support).
    group = f"qm_{name}_{uuid.uuid4().hex[:8]}"
    defaults = {"transform": MERGE, "sink": f"cypherl://{out}", "consumer_group": group, "batch_size": 100,
                "batch_interval_ms": 50, "configs": dict(QUICK_FIRST_JOIN), "credentials": {}}
    defaults.update(options)
    return memgraph.call("streams.create", name, [topic], bootstrap, *defaults.values())


# -- signatures ---------------------------------------------------------------------
def test_every_procedure_registers_with_its_signature(memgraph):
    rows = {row["name"]: row for row in memgraph.procedures() if row["name"].startswith("streams.")}
    assert {name: row["signature"] for name, row in rows.items()} == SIGNATURES
    assert not any(row["is_write"] for row in rows.values()), "they never write the graph themselves"


def test_every_procedure_has_a_docstring(memgraph):
    module = memgraph.python_module("streams")
    for name in SIGNATURES:
        proc = memgraph.procedure(name)
        assert (proc.callback.__doc__ or "").strip(), f"{name} has no docstring"
    assert module.__doc__


@pytest.mark.parametrize("env_sink, default", [(None, "bolt://localhost:7687"),
                                               ("bolt://127.0.0.2:7687", "bolt://127.0.0.2:7687")])
def test_defaults_give_a_working_stream(bolt_connected, kafka, monkeypatch, env_sink, default):
    """sink defaults to $MGSTREAMS_DEFAULT_SINK as it was when Memgraph loaded the module (a container's
    compose Memgraph); transform "" stores messages as :KafkaMessage nodes; consumer_group "" is mgstreams_<name>."""
    if env_sink is None:
        monkeypatch.delenv(SINK_ENV, raising=False)
    else:
        monkeypatch.setenv(SINK_ENV, env_sink)
    with mgp_environment([QUERY_MODULES]) as server:
        server.load_all()
        [row] = [r for r in server.procedures() if r["name"] == "streams.create"]
        assert row["signature"] == SIGNATURES["streams.create"].replace("bolt://localhost:7687", default)
        topic = kafka.new_topic(partitions=1)
        assert server.call("streams.create", "plain", [topic], kafka.bootstrap_servers) == \
            [{"name": "plain", "status": "created"}]
        [listed] = server.call("streams.list")
    assert listed["sink"] == default
    assert listed["transform"] == MERGE and listed["consumer_group"] == "mgstreams_plain"


# -- wrong Cypher types: rejected by the server before the module runs ---------------------
@pytest.mark.parametrize("procedure, args, message", [
    ("streams.create", ("s", "topic", "localhost:9092"),
     "'streams.create' argument named 'topics' at position 1 must be of type LIST OF STRING."),
    ("streams.create", ("s", ["t"], "localhost:9092", "", "cypherl:///tmp/x", "", "100"),
     "'streams.create' argument named 'batch_size' at position 6 must be of type INTEGER."),
    ("streams.create", ("s", ["t"], "localhost:9092", "", "cypherl:///tmp/x", "", 1, 1, ["a"]),
     "'streams.create' argument named 'configs' at position 8 must be of type MAP."),
    ("streams.start", (1,), "'streams.start' argument named 'name' at position 0 must be of type STRING."),
    ("streams.set_stream_offset", ("s", None),
     "'streams.set_stream_offset' argument named 'offset' at position 1 must be of type ANY."),
    ("streams.set_stream_offset", ("s", 10, 1.5),
     "'streams.set_stream_offset' argument named 'timeout_ms' at position 2 must be of type INTEGER."),
    ("streams.set_stream_offset", ("s", 10, 100, "yes"),
     "'streams.set_stream_offset' argument named 'dry_run' at position 3 must be of type BOOLEAN."),
    ("streams.list", ("s",), "'streams.list' requires no arguments."),
    ("streams.offsets", (), "'streams.offsets' requires exactly 1 argument."),
    ("streams.create", ("s", ["t"]), "'streams.create' requires between 3 and 12 arguments."),
])
def test_wrong_cypher_types_give_clear_errors(memgraph, procedure, args, message):
    assert str(memgraph.refusal(procedure, *args)) == message


# -- failures: one clear line -------------------------------------------------------------
def test_validation_failures_name_the_field_and_value(memgraph, connected):
    error = memgraph.refusal("streams.create", "bad name", ["t"], "localhost:9092")
    assert error.last_line.startswith("Exception: name: 'bad name' is not a valid stream name")
    assert error.message.startswith("streams.create: ")
    error = memgraph.refusal("streams.create", "s", ["t"], "no-port")
    assert error.last_line == "Exception: bootstrap_servers: 'no-port' is not host:port"
    error = memgraph.refusal("streams.create", "s", ["t"], "localhost:9092", "", "ftp://x")
    assert error.last_line.startswith("Exception: sink: ") and "ftp://x" in error.last_line
    error = memgraph.refusal("streams.create", "s", ["t"], "localhost:9092", "", "cypherl:///tmp/x", "", 0)
    assert error.last_line == "Exception: batch_size: must be a positive integer, got 0"
    assert memgraph.call("streams.list") == [], "nothing is stored when a check fails"


def test_unknown_stream_is_an_error_everywhere(memgraph, connected):
    for procedure in ("streams.start", "streams.stop", "streams.drop", "streams.offsets", "streams.history",
                      "streams.pending", "streams.check"):
        error = memgraph.refusal(procedure, "foo")
        assert error.last_line == "Exception: name: no stream named 'foo'", procedure
    for procedure, args in [("streams.set_stream_offset", (10,)), ("streams.revert", (1,)),
                            ("streams.pending", (True,)), ("streams.check", ("earliest", 5))]:
        error = memgraph.refusal(procedure, "foo", *args)
        assert error.last_line == "Exception: name: no stream named 'foo'", procedure
    assert memgraph.call("streams.list") == []


def test_offset_and_timeout_are_validated(memgraph, connected):
    error = memgraph.refusal("streams.set_stream_offset", "foo", "next tuesday")
    assert error.last_line.startswith("Exception: offset: cannot parse 'next tuesday'")
    error = memgraph.refusal("streams.set_stream_offset", "foo", -3)
    assert error.last_line.startswith("Exception: offset: invalid offset -3")
    error = memgraph.refusal("streams.set_stream_offset", "foo", {"t:x": 1})
    assert "map key 't:x'" in error.last_line
    error = memgraph.refusal("streams.set_stream_offset", "foo", 10, 0)
    assert error.last_line == "Exception: timeout_ms: must be a positive number of milliseconds, got 0"


def test_a_node_is_neither_a_configs_map_nor_an_offset(memgraph):
    """Checked in the module: nothing is sent (no host is needed to say so)."""
    vertex = memgraph.vertex(memgraph.store.add_vertex(["Config"], {"x": 1}))
    error = memgraph.refusal("streams.create", "s", ["t"], "localhost:9092", "", "cypherl:///tmp/x", "", 1, 1,
                     vertex)
    assert error.last_line == "Exception: configs: expected a map, got Vertex"
    error = memgraph.refusal("streams.set_stream_offset", "s", vertex)
    assert error.last_line.startswith("Exception: offset: a Vertex cannot be sent to the host")
    error = memgraph.refusal("streams.set_stream_offset", "s", {"t:0": vertex})
    assert error.last_line.startswith("Exception: offset: a Vertex cannot be sent to the host")


class _Misbehaving(http.server.BaseHTTPRequestHandler):
    """Something at MGSTREAMS_URL that is not a healthy host: answers by the first path segment's mode."""
    release = threading.Event()

    def _answer(self):
        mode = self.server.mode
        if mode == "silent":
            self.release.wait(30)
            return
        status, kind, body = {"html": (502, "text/html", b"<html>Bad Gateway</html>"),
                              "bug": (500, "application/json", b'{"error": "internal error: KeyError"}')}[mode]
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PATCH = do_PUT = do_POST = do_DELETE = _answer

    def log_message(self, *args):
        pass


def test_a_broken_or_silent_host_is_one_clear_line(memgraph, monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Misbehaving)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("MGSTREAMS_URL", url)
    try:
        server.mode = "html"
        error = memgraph.refusal("streams.list")
        assert error.last_line == f"Exception: host: {url} answered HTTP 502 without JSON; is it an mgstreams host?"
        server.mode = "bug"
        assert memgraph.refusal("streams.start", "s").last_line == "Exception: internal error: KeyError"

        server.mode = "silent"
        began = time.monotonic()
        error = memgraph.refusal("streams.set_stream_offset", "s", 10, 100)
        took = time.monotonic() - began
        assert error.last_line == f"Exception: host: no answer from {url} within 5.1 s"
        assert 5.0 <= took < 5.1 + 2.0, "its own timeout (0.1 s) plus the margin, no more"
        assert "During handling" not in error.message
    finally:
        _Misbehaving.release.set()
        server.shutdown()
        server.server_close()


class _KeepAlive(http.server.BaseHTTPRequestHandler):
    """An HTTP/1.1 server that keeps connections open (as the host's uvicorn does) and counts them; its
    connections are kept in `server.connections`, for the test to close them as the host's idle timeout does."""
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        with self.server.lock:
            self.server.connections.append(self.connection)

    def do_GET(self):
        body = b"[]"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_calls_reuse_one_connection_and_survive_the_host_closing_it(memgraph, monkeypatch):
    """An offset change is a few milliseconds: a TCP connection per call was a tenth of it. Calls go over one
    kept connection; one the host closed while idle (its keep-alive timeout) is replaced, the call unharmed."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _KeepAlive)
    server.daemon_threads = True
    server.connections, server.lock = [], threading.Lock()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("MGSTREAMS_URL", f"http://127.0.0.1:{server.server_address[1]}")
    try:
        for _ in range(5):
            assert memgraph.call("streams.list") == []
        assert len(server.connections) == 1, "five calls, one connection"
        with server.lock:
            for connection in server.connections:
                connection.shutdown(socket.SHUT_RDWR)
        assert memgraph.call("streams.list") == [], "the closed connection is replaced, the call answered"
        assert len(server.connections) == 2
        assert memgraph.call("streams.list") == []
        assert len(server.connections) == 2, "and kept in turn"
    finally:
        server.shutdown()
        server.server_close()


def test_without_a_host_every_call_says_where_and_what_to_start(memgraph, monkeypatch):
    url = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("MGSTREAMS_URL", url)
    for procedure, args in EVERY_CALL:
        error = memgraph.refusal(procedure, *args)
        assert error.last_line == f"Exception: no mgstreams host at {url}: start one with `mgstreams serve`"
        assert "During handling" not in error.message, "one error, not a chain of them"
    monkeypatch.setenv("MGSTREAMS_URL", "localhost:8765")
    assert memgraph.refusal("streams.list").last_line == \
        "Exception: MGSTREAMS_URL: 'localhost:8765' is not an http:// URL"
    monkeypatch.delenv("MGSTREAMS_URL")
    try:   # the default address, when nothing else on this machine serves it
        free_port_8765 = socket.create_server(("127.0.0.1", 8765))
    except OSError:
        return
    free_port_8765.close()
    assert memgraph.refusal("streams.list").last_line == \
        "Exception: no mgstreams host at http://127.0.0.1:8765: start one with `mgstreams serve`"


def test_a_host_with_a_token_needs_it_and_no_error_shows_it(memgraph, kafka, tmp_path, monkeypatch):
    token = "s3cret"
    host = HostProcess(tmp_path / "state", token=token).start()
    messages = []
    try:
        monkeypatch.setenv("MGSTREAMS_URL", host.url)
        for given in (None, "wr0ng-t0ken"):
            if given is None:
                monkeypatch.delenv("MGSTREAMS_TOKEN", raising=False)
            else:
                monkeypatch.setenv("MGSTREAMS_TOKEN", given)
            for procedure, args in EVERY_CALL:
                error = memgraph.refusal(procedure, *args)
                assert error.last_line == NO_TOKEN, (given, procedure)
                messages.append(error.message)

        monkeypatch.setenv("MGSTREAMS_TOKEN", token)
        topic = kafka.new_topic(partitions=1)
        assert create(memgraph, "guarded", topic, kafka.bootstrap_servers, tmp_path / "out.cypherl") == \
            [{"name": "guarded", "status": "created"}]
        assert [s["name"] for s in memgraph.call("streams.list")] == ["guarded"]
        messages.append(memgraph.refusal("streams.start", "nope").message)
        messages.append(memgraph.refusal("streams.create", "bad name", [topic], kafka.bootstrap_servers).message)
        host.stop()
        messages.append(memgraph.refusal("streams.list").message)
    finally:
        host.stop()
    assert len(messages) == 2 * len(EVERY_CALL) + 3
    assert not [m for m in messages if token in m or "wr0ng-t0ken" in m]
    assert token not in host.log()


# -- on Kafka ---------------------------------------------------------------------------------
def test_create_list_drop_and_masked_credentials(memgraph, connected, kafka, tmp_path):
    topic = kafka.new_topic(partitions=2)
    secret = "S3cr3tP4ssw0rd"
    out = tmp_path / "out.cypherl"
    [row] = create(memgraph, "orders", topic, kafka.bootstrap_servers, out,
                   consumer_group="", configs={"client.id": "mg", "sasl.password": secret},
                   credentials={"sasl.username": "michael"})
    assert row == {"name": "orders", "status": "created"}
    [listed] = memgraph.call("streams.list")
    assert listed["name"] == "orders" and listed["topics"] == [topic] and listed["status"] == "created"
    assert listed["consumer_group"] == "mgstreams_orders" and listed["transform"] == MERGE
    assert listed["sink"] == f"cypherl://{out}" and listed["error"] is None
    assert listed["pid"] is None and listed["rss_bytes"] is None, "no process while it is not running"
    assert listed["configs"]["client.id"] == "mg"
    assert secret not in repr(listed) and "michael" not in repr(listed)
    assert set(listed["credentials"]) == {"sasl.username"}
    duplicate = memgraph.refusal("streams.create", "orders", [topic], kafka.bootstrap_servers, MERGE,
                         f"cypherl://{out}")
    assert duplicate.last_line == "Exception: name: a stream named 'orders' already exists"
    assert memgraph.call("streams.drop", "orders") == [{"name": "orders", "status": "created"}]
    assert memgraph.call("streams.list") == []
    assert secret not in connected.log()


def test_alter_from_cypher(memgraph, connected, kafka, quick_rebalance, tmp_path):
    """streams.alter: a running stream restarts with the new config; a refusal names the field and changes nothing."""
    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 3, partitions=1)
    first, second = tmp_path / "first.cypherl", tmp_path / "second.cypherl"
    create(memgraph, "altered", topic, kafka.bootstrap_servers, first, configs=FAST_REJOIN)
    memgraph.call("streams.start", "altered")
    wait_until(lambda: len(delivered_from_file(first)) == 3, what="the first messages")
    [before] = memgraph.call("streams.list")
    for changes, message in [({"batch_size": -5}, "batch_size: must be a positive integer, got -5"),
                             ({"configs": {"plugin.library.paths": "/tmp/x.so"}}, "configs['plugin.library.paths']: "),
                             ({"topics": ["x"]}, "topics: cannot be altered")]:
        assert memgraph.refusal("streams.alter", "altered", changes).last_line.startswith(f"Exception: {message}")
        [now] = memgraph.call("streams.list")
        assert {k: v for k, v in now.items() if k != "rss_bytes"} == \
            {k: v for k, v in before.items() if k != "rss_bytes"}, "a refused alter changes nothing"
    [row] = memgraph.call("streams.alter", "altered", {"sink": f"cypherl://{second}", "batch_size": 20})
    assert row["name"] == "altered" and row["status"] in ("starting", "running")
    [after] = memgraph.call("streams.list")
    assert (after["sink"], after["batch_size"], after["pid"] != before["pid"]) == (f"cypherl://{second}", 20, True)
    kafka.produce(topic, 2, partitions=1)
    wait_until(lambda: [o for _, _, o in delivered_from_file(second)] == [3, 4], what="the new sink, from offset 3")
    assert memgraph.refusal("streams.alter", "nosuch", {"batch_size": 5}).last_line == \
        "Exception: name: no stream named 'nosuch'"


def test_unknown_topic_is_rejected_at_create(memgraph, connected, kafka, tmp_path):
    error = memgraph.refusal("streams.create", "s", ["no_such_topic_x1"], kafka.bootstrap_servers, MERGE,
                     f"cypherl://{tmp_path / 'out.cypherl'}")
    assert error.last_line.startswith("Exception: topics: ") and "no_such_topic_x1" in error.last_line
    assert memgraph.call("streams.list") == []


def _delivered(out: Path, since: int = 0) -> dict[tuple[str, int], list[int]]:
    return by_partition(delivered_from_file(out)[since:])


def _wait_for(out: Path, since: int, last: dict[tuple[str, int], int]) -> dict:
    wait_until(lambda: all(offset in _delivered(out, since).get(tp, []) for tp, offset in last.items()),
               timeout=20, what=f"offsets {last}")
    return _delivered(out, since)


def test_memgraph_set_offset_scenarios_on_three_partitions(memgraph, connected, kafka, quick_rebalance, tmp_path):
    """Memgraph's e2e `test_set_offset` (10, then -1 = beginning, then -2 = end) on every partition.

    Memgraph stops the stream around each call; here the stream starts once and
    the later offsets are set while it runs (a stop/start cycle in one group
    waits out the embedded cluster's ~44 s member expiry; tests of restarts
    live with the registry's). Setting before the first start is the stopped case.
    """
    topic = kafka.new_topic(partitions=3)
    kafka.produce(topic, 60, partitions=3)                     # offsets 0..19 on each partition
    out = tmp_path / "out.cypherl"
    create(memgraph, "test", topic, kafka.bootstrap_servers, out, batch_size=1)
    partitions = [(topic, p) for p in range(3)]

    assert memgraph.refusal("streams.set_stream_offset", "foo", 10).last_line == \
        "Exception: name: no stream named 'foo'"

    changes = memgraph.call("streams.set_stream_offset", "test", 10)
    assert sorted((c["topic"], c["partition"], c["offset"], c["status"]) for c in changes) == \
        [(t, p, 10, "pending") for t, p in partitions]
    assert all(c["previous_offset"] is None for c in changes)   # nothing committed yet
    [started] = memgraph.call("streams.start", "test")
    assert started["status"] in ("starting", "running")
    got = _wait_for(out, 0, {tp: 19 for tp in partitions})
    assert got == {tp: list(range(10, 20)) for tp in partitions}

    since = len(delivered_from_file(out))
    changes = memgraph.call("streams.set_stream_offset", "test", -1, SETTLED_MS)
    assert {(c["offset"], c["previous_offset"], c["status"]) for c in changes} == {(0, 20, "applied")}
    got = _wait_for(out, since, {tp: 19 for tp in partitions})
    assert got == {tp: list(range(0, 20)) for tp in partitions}

    since = len(delivered_from_file(out))
    changes = memgraph.call("streams.set_stream_offset", "test", -2, SETTLED_MS)
    assert {(c["offset"], c["status"]) for c in changes} == {(20, "applied")}
    kafka.produce(topic, 3, partitions=3)                      # the "Final Message" on each partition
    got = _wait_for(out, since, {tp: 20 for tp in partitions})
    assert got == {tp: [20] for tp in partitions}, "nothing before the end is replayed"
    assert memgraph.call("streams.stop", "test") == [{"name": "test", "status": "stopped"}]

    rows = memgraph.call("streams.offsets", "test")
    assert sorted((r["partition"], r["committed_offset"], r["log_start_offset"], r["log_end_offset"], r["lag"],
                   r["assigned"], r["topic"]) for r in rows) == [(p, 21, 0, 21, 0, False, topic) for p in range(3)]

    history = memgraph.call("streams.history", "test")
    assert sorted((h["offset"], h["partition"], h["status"]) for h in history) == \
        sorted((o, p, "applied") for o in (10, 0, 20) for p in range(3))
    assert {(h["offset"], h["previous_offset"]) for h in history if h["offset"] != 10} == {(0, 20), (20, 20)}
    assert all(isinstance(h["changed_at"], datetime.datetime) and h["changed_at"].tzinfo is None for h in history)
    assert [h["changed_at"] for h in history] == sorted((h["changed_at"] for h in history), reverse=True)
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    assert all(abs(now - h["changed_at"]) < datetime.timedelta(minutes=2) for h in history), "UTC wall clock"


def test_set_offset_while_running_applies_on_the_assigned_partitions(memgraph, connected, kafka, quick_rebalance,
                                                                     tmp_path):
    topic = kafka.new_topic(partitions=3)
    kafka.produce(topic, 30, partitions=3)                     # offsets 0..9 on each partition
    out = tmp_path / "out.cypherl"
    create(memgraph, "live", topic, kafka.bootstrap_servers, out)
    memgraph.call("streams.start", "live")
    wait_until(lambda: len(delivered_from_file(out)) >= 30, timeout=20, what="the first 30 messages")
    [listed] = memgraph.call("streams.list")
    assert listed["status"] == "running" and listed["restart"] == "on-failure" and listed["restarts"] == 0
    assert listed["pid"] > 0 and listed["rss_bytes"] > 0, "the stream's own process, seen from Cypher"

    planned = memgraph.call("streams.set_stream_offset", "live", {f"{topic}:0": 5}, 10000, True)
    assert [(c["partition"], c["previous_offset"], c["offset"], c["status"]) for c in planned] == \
        [(0, 10, 5, "planned")]
    since = len(delivered_from_file(out))
    changes = memgraph.call("streams.set_stream_offset", "live", {f"{topic}:0": 5}, SETTLED_MS)
    assert [(c["partition"], c["previous_offset"], c["offset"], c["status"]) for c in changes] == \
        [(0, 10, 5, "applied")]
    wait_until(lambda: 9 in _delivered(out, since).get((topic, 0), []), timeout=20, what="the replay")
    assert _delivered(out, since) == {(topic, 0): list(range(5, 10))}

    clamped = memgraph.call("streams.set_stream_offset", "live", {topic: 1000})
    assert {(c["offset"], c["status"]) for c in clamped} == {(10, "clamped")}
    assert all("clamped" in c["message"] for c in clamped)
    memgraph.call("streams.drop", "live")


# -- Memgraph's reload, the module's process, the CLI ------------------------------------------
def test_reload_keeps_one_consumer_per_stream(connected, kafka, quick_rebalance, tmp_path):
    """`CALL mg.load("streams")` and `CALL mg.load_all()` purge what the module imports and import it again;
    the stream keeps its one consumer: a later offset change is applied at once on every partition and each
    offset from there is written once."""
    topic = kafka.new_topic(partitions=3)
    kafka.produce(topic, 30, partitions=3)                     # offsets 0..9 on each partition
    out = tmp_path / "out.cypherl"
    partitions = [(topic, p) for p in range(3)]
    with mgp_environment([QUERY_MODULES]) as memgraph:
        memgraph.load_all()
        create(memgraph, "kept", topic, kafka.bootstrap_servers, out)
        memgraph.call("streams.start", "kept")
        wait_until(lambda: len(delivered_from_file(out)) >= 30, timeout=20, what="the first 30 messages")
        wait_until(lambda: memgraph.call("streams.list")[0]["status"] == "running", what="running")
        def listed_now():   # resident memory moves from call to call; the same pid means the same process
            return [{k: v for k, v in row.items() if k != "rss_bytes"} for row in memgraph.call("streams.list")]

        listed = listed_now()

        first_mgp = memgraph.mgp
        before = memgraph.python_module("streams")
        memgraph.reload("streams")
        assert memgraph.python_module("streams") is not before
        assert memgraph.mgp is not first_mgp, "the reload purged and re-imported `mgp`, as Memgraph's does"
        assert listed_now() == listed
        memgraph.load_all()
        assert listed_now() == listed

        since = len(delivered_from_file(out))
        changes = memgraph.call("streams.set_stream_offset", "kept", 4, SETTLED_MS)
        assert sorted((c["topic"], c["partition"], c["previous_offset"], c["offset"], c["status"])
                      for c in changes) == [(t, p, 10, 4, "applied") for t, p in partitions]
        _wait_for(out, since, {tp: 9 for tp in partitions})
        time.sleep(1.0)   # twenty batch intervals: a second consumer would have written its copy by now
        assert _delivered(out, since) == {tp: list(range(4, 10)) for tp in partitions}
        assert len(memgraph.call("streams.history", "kept")) == 3


ISOLATED = textwrap.dedent('''
    import json, sys, threading
    from mgp_backend import mgp_environment

    module_file, topic, bootstrap, sink = sys.argv[1:5]
    with mgp_environment() as memgraph:
        modules_before, threads_before = set(sys.modules), threading.active_count()
        memgraph.load_module(module_file)
        results = {
            "create": memgraph.call("streams.create", "iso", [topic], bootstrap, "", sink),
            "start": memgraph.call("streams.start", "iso"),
            "list": memgraph.call("streams.list"),
            "offsets": memgraph.call("streams.offsets", "iso"),
            "planned": memgraph.call("streams.set_stream_offset", "iso", 0, 10000, True),
            "history": memgraph.call("streams.history", "iso"),
            "drop": memgraph.call("streams.drop", "iso"),
        }
        report = {"results": results, "threads": [threads_before, threading.active_count()],
                  "thread_names": [t.name for t in threading.enumerate()],
                  "imported": sorted(set(sys.modules) - modules_before), "modules": sorted(sys.modules)}
    print(json.dumps(report, default=str))
''')


def test_the_module_process_holds_no_kafka_client_and_no_thread(connected, kafka, tmp_path):
    """In a Python process holding nothing else, the module's calls import only the standard library (no
    confluent_kafka, no stream_registry) and leave no thread behind: Memgraph's process stays clean."""
    topic = kafka.new_topic(partitions=2)
    env = {**os.environ, "PYTHONPATH": str(SUPPORT)}
    done = subprocess.run([sys.executable, "-c", ISOLATED, str(QUERY_MODULES / "streams.py"), topic,
                           kafka.bootstrap_servers, f"cypherl://{tmp_path / 'out.cypherl'}"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    results = report["results"]
    assert results["create"] == [{"name": "iso", "status": "created"}]
    assert [s["name"] for s in results["list"]] == ["iso"]
    assert sorted(r["partition"] for r in results["offsets"]) == [0, 1]
    assert {r["status"] for r in results["planned"]} == {"planned"}
    assert results["drop"][0]["name"] == "iso"

    top_level = {name.split(".")[0] for name in report["modules"]}
    assert not top_level & {"confluent_kafka", "stream_registry", "mgstreams"}, top_level
    foreign = {name for name in report["imported"] if name.split(".")[0] not in sys.stdlib_module_names}
    assert foreign == {"streams"}, "the module imports only the standard library and mgp"
    assert report["threads"][1] == report["threads"][0], report["thread_names"]


def test_the_cli_moves_the_stream_the_module_created(memgraph, connected, kafka, quick_rebalance, tmp_path):
    """One owner: `mgstreams set-offset` acts on the very stream Cypher created and runs."""
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 20, partitions=2)                     # offsets 0..9 on each partition
    out = tmp_path / "out.cypherl"
    partitions = [(topic, p) for p in range(2)]
    create(memgraph, "shared", topic, kafka.bootstrap_servers, out)
    memgraph.call("streams.start", "shared")
    wait_until(lambda: len(delivered_from_file(out)) >= 20, timeout=20, what="the first 20 messages")
    wait_until(lambda: memgraph.call("streams.list")[0]["status"] == "running", what="running")

    since = len(delivered_from_file(out))
    done = subprocess.run([sys.executable, "-m", "mgstreams", "--url", connected.url, "set-offset", "shared", "5",
                           "--json", "--timeout", str(SETTLED_MS / 1000)], capture_output=True, text=True, cwd=ROOT, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert sorted((c["partition"], c["previous_offset"], c["offset"], c["status"])
                  for c in json.loads(done.stdout)) == [(0, 10, 5, "applied"), (1, 10, 5, "applied")]

    assert _wait_for(out, since, {tp: 9 for tp in partitions}) == {tp: list(range(5, 10)) for tp in partitions}
    history = memgraph.call("streams.history", "shared")
    assert sorted((h["topic"], h["partition"], h["previous_offset"], h["offset"], h["status"]) for h in history) == \
        [(t, p, 10, 5, "applied") for t, p in partitions]
    wait_until(lambda: all(r["committed_offset"] == 10 for r in memgraph.call("streams.offsets", "shared")),
               what="the replay committed")
    rows = memgraph.call("streams.offsets", "shared")
    assert sorted((r["partition"], r["committed_offset"], r["lag"], r["assigned"]) for r in rows) == \
        [(0, 10, 0, True), (1, 10, 0, True)]
