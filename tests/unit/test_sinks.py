"""Sinks: URI validation, cypherl files, the null sink, and Bolt as the driver sees it."""
from __future__ import annotations

import os

import pytest
from mgclient_standin import mgclient
from mgclient_standin.mgclient import Server

from stream_registry.errors import ConfigError, SinkError
from stream_registry.graph import sinks
from stream_registry.graph.sinks import BoltSink, CypherlSink, NullSink, Written, open_sink, validate_sink_uri
from stream_registry.graph.transform import Statement

PASSWORD = "s3cr3t-pw"
CREDENTIALS = {"bolt.username": "ingest", "bolt.password": PASSWORD}


# -- URIs -------------------------------------------------------------------------
@pytest.mark.parametrize("uri", [
    "null://", "cypherl:///tmp/x/out.cypherl", "cypherl:///tmp/out.cypherl?fsync=true",
    "bolt://localhost", "bolt://memgraph:7688", "bolt+ssc://10.0.0.1:7687?retries=3",
    "bolt+s://db.example.com?fingerprint=AB:CD:EF:01:23:45:67:89", "BOLT://h",
])
def test_valid_uris(uri):
    validate_sink_uri(uri)


@pytest.mark.parametrize("uri, message", [
    ("", "expected a URI"), (None, "expected a URI"), ("/tmp/x.cypherl", "expected a URI"),
    ("kafka://x", "unknown scheme 'kafka'"),
    ("cypherl://relative/out.cypherl", "not an absolute path"), ("cypherl:relative.cypherl", "expected a URI"),
    ("cypherl:///tmp/dir/", "does not name a file"), ("cypherl:///tmp/x?fsync=maybe", "fsync='maybe'"),
    ("cypherl:///tmp/x?gzip=1", "unknown option 'gzip'"), ("null://host", "null:// takes no host"),
    ("bolt://", "expected bolt://host"), ("bolt://h:notaport", "invalid port"), ("bolt://h/db", "expected bolt://host"),
    ("bolt://h?retries=0", "retries='0'"), ("bolt://h?fingerprint=ab", "unknown option 'fingerprint'"),
    ("bolt+s://h?fingerprint=zz", "is not hex"), ("bolt://h#frag", "fragment"),
])
def test_invalid_uris_name_the_sink_field_and_the_uri(uri, message):
    with pytest.raises(ConfigError, match=message) as err:
        validate_sink_uri(uri)
    assert str(err.value).startswith("sink:") and (not uri or repr(uri) in str(err.value))


def test_credentials_in_the_uri_are_refused_without_showing_them():
    with pytest.raises(ConfigError) as err:
        validate_sink_uri(f"bolt://ingest:{PASSWORD}@memgraph:7687")
    assert PASSWORD not in str(err.value) and "bolt.password" in str(err.value)


def test_without_an_output_policy_a_file_sink_writes_where_it_is_told(tmp_path, monkeypatch):
    """The registry always gives an OutputPolicy (test_hostile_input); an operator's command line (the Spark
    backfill) gives none and writes wherever the operator says, whatever MGSTREAMS_OUTPUT_DIRS holds."""
    monkeypatch.setenv(sinks.OUTPUT_DIRS_ENV, str(tmp_path / "elsewhere"))
    target = tmp_path / "anywhere" / "part-0.cypherl"
    validate_sink_uri(f"cypherl://{target}")
    with open_sink(f"cypherl://{target}") as sink:
        sink.write([Statement("RETURN 1")])
    assert [line for line in target.read_text().splitlines() if not line.startswith("//")] == ["RETURN 1;"]


def test_validation_never_touches_the_file_system_or_network(tmp_path, monkeypatch):
    monkeypatch.setattr(sinks.bolt, "connect_driver", lambda **kw: pytest.fail("connected"))
    validate_sink_uri(f"cypherl://{tmp_path}/new/dir/out.cypherl")
    validate_sink_uri("bolt://unreachable.invalid:1")
    assert not (tmp_path / "new").exists()


# -- null:// ------------------------------------------------------------------------
def test_null_sink_counts():
    with open_sink("null://") as sink:
        sink.write([Statement("RETURN 1")] * 3)
        sink.write([Statement("RETURN 2")])
    assert isinstance(sink, NullSink) and (sink.batches, sink.statements) == (2, 4)


# -- cypherl:// ------------------------------------------------------------------------
def test_cypherl_appends_one_line_per_statement_and_creates_the_directory(tmp_path):
    path = tmp_path / "deep" / "dir" / "out.cypherl"
    with open_sink(f"cypherl://{path}") as sink:
        sink.write([Statement("MERGE (n:A {id: $id})", {"id": 1}),
                    Statement("MATCH (n:A {id: $id})\nSET n.v = $v;", {"id": 1, "v": "multi\nline 'quoted'"})])
        sink.write([Statement("RETURN $x", {"x": [1.5, None]})])
    assert statements_in(path) == [
        "MERGE (n:A {id: 1});",
        "MATCH (n:A {id: 1}) SET n.v = \"multi\\nline \\'quoted\\'\";",
        "RETURN [1.5, null];",
    ]
    with open_sink(f"cypherl://{path}") as again:                     # reopening appends
        again.write([Statement("RETURN 2")])
    assert statements_in(path)[-1] == "RETURN 2;"
    lines = path.read_text().splitlines()
    assert lines[0] == "// mgstreams-batch 0 00000000" and lines[-1].startswith("// mgstreams-batch ")
    assert sum(line.startswith("// mgstreams-batch ") for line in lines) == 4   # the file's, then one a batch


def statements_in(path) -> list[str]:
    """The statement lines of a cypherl file, without its frame lines (comments)."""
    return [line for line in path.read_text(encoding="utf-8").splitlines() if not line.startswith("//")]


def test_cypherl_writes_a_batch_with_a_single_write(tmp_path, monkeypatch):
    calls = []
    real_writev = os.writev
    sink = CypherlSink(str(tmp_path / "out.cypherl"))
    monkeypatch.setattr(sinks.cypherl.os, "writev", lambda fd, data: calls.append(len(data)) or real_writev(fd, data))
    sink.write([Statement("RETURN $i", {"i": i}) for i in range(500)])
    assert calls == [2]    # the batch and its frame line, in one call
    sink.close()


def test_cypherl_batch_that_cannot_be_rendered_writes_nothing(tmp_path):
    path = tmp_path / "out.cypherl"
    sink = CypherlSink(str(path))
    sink.write([Statement("RETURN 1")])
    with pytest.raises(SinkError, match=r"statement 1 of the batch: parameter \$x: float nan"):
        sink.write([Statement("RETURN 2"), Statement("RETURN $x", {"x": float("nan")})])
    assert statements_in(path) == ["RETURN 1;"]


def test_cypherl_failed_write_is_cut_back_to_the_previous_size(tmp_path, monkeypatch):
    path = tmp_path / "out.cypherl"
    sink = CypherlSink(str(path))
    sink.write([Statement("RETURN 1")])
    real_writev = os.writev
    before = path.read_bytes()

    calls = []

    def half_then_fail(fd, buffers):
        calls.append(fd)
        if len(calls) == 1:
            return os.write(fd, bytes(buffers[0][:len(buffers[0]) // 2]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sinks.cypherl.os, "writev", half_then_fail)
    with pytest.raises(SinkError, match="No space left on device") as failed:
        sink.write([Statement("RETURN $s", {"s": "x" * 1000})])
    assert failed.value.transient, "a full disk is the sink's trouble, retried, never a message's fault"
    assert path.read_bytes() == before
    monkeypatch.setattr(sinks.cypherl.os, "writev", real_writev)


def test_cypherl_fsync_option(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(sinks.cypherl.os, "fsync", synced.append)
    with open_sink(f"cypherl://{tmp_path}/a.cypherl?fsync=true") as sink:
        sink.write([Statement("RETURN 1")])
    assert len(synced) == 2    # the new file's first frame, then the batch
    with open_sink(f"cypherl://{tmp_path}/b.cypherl") as sink:
        sink.write([Statement("RETURN 1")])
    assert len(synced) == 2


def test_cypherl_after_close_is_an_error(tmp_path):
    sink = CypherlSink(str(tmp_path / "x.cypherl"))
    sink.close()
    sink.close()
    with pytest.raises(SinkError, match="after close"):
        sink.write([Statement("RETURN 1")])


# -- bolt:// as the driver sees it ------------------------------------------------------------
@pytest.fixture
def server(monkeypatch):
    """The Bolt connection stand-in, what the Bolt sink connects to here; its log is what the driver was asked."""
    standin = Server(rtt_ms=0)
    monkeypatch.setattr(sinks.bolt, "connect_driver", standin.connect)
    return standin


BATCH = [Statement("MERGE (a:Account {id: $id})", {"id": "acc-1"}),
         Statement("MATCH (a:Account {id: $id}) SET a.seen = $seen", {"id": "acc-1", "seen": b"yes"})]


def test_bolt_connects_lazily_and_runs_one_transaction_per_batch(server):
    """A batch is one transaction; a batch of one statement is a transaction of its own (autocommit: one round
    trip, not BEGIN, the statement and COMMIT)."""
    sink = open_sink("bolt://memgraph:7688", CREDENTIALS)
    assert server.connects == []
    sink.write(BATCH)
    sink.write(BATCH[:1])
    assert server.connects == [{"host": "memgraph", "port": 7688, "scheme": "bolt", "username": "ingest",
                                "password": PASSWORD, "fingerprint": None, "engine": "memgraph"}]
    assert server.executed() == [
        ("MERGE (a:Account {id: $id})", {"id": "acc-1"}),
        ("MATCH (a:Account {id: $id}) SET a.seen = $seen", {"id": "acc-1", "seen": "yes"}),   # bytes as text
        ("MERGE (a:Account {id: $id})", {"id": "acc-1"}),
    ]
    assert [entry[3] for entry in server.log if entry[0] == "execute"] == [False, False, True]   # autocommit
    assert server.count("commit") == 1 and server.count("rollback") == 0
    assert server.round_trips == 4 + 1   # BEGIN, two statements, COMMIT; then the statement alone
    sink.write(BATCH)
    assert server.count("commit") == 2, "the connection is back to explicit transactions"
    sink.close()
    assert server.log[-1] == ("close",)


def test_bolt_without_credentials_and_encrypted_schemes(server):
    """What the client is given per scheme (bolt_driver.tls_context turns it into the TLS context: the handshake
    itself is in test_tls_fingerprint.py and test_hostile_input.py)."""
    open_sink("bolt://h").write(BATCH[:1])
    assert server.connects[-1] == {"host": "h", "port": 7687, "scheme": "bolt", "username": None, "password": None,
                                   "fingerprint": None, "engine": "memgraph"}
    open_sink("bolt+ssc://h:1?fingerprint=AB:cd:01:23:45:67:89:EF").write(BATCH[:1])   # a pinned self-signed key
    assert server.connects[-1]["scheme"] == "bolt+ssc" and server.connects[-1]["fingerprint"] == "abcd0123456789ef"
    open_sink("bolt+s://h?engine=falkordb").write(BATCH[:1])
    assert server.connects[-1]["scheme"] == "bolt+s" and server.connects[-1]["engine"] == "falkordb"
    with pytest.raises(ConfigError, match="option engine='neo4j' .* is not one of memgraph, falkordb"):
        open_sink("bolt://h?engine=neo4j")


def test_bolt_retries_the_whole_batch_after_a_transient_failure(server):
    server.failures = [None, mgclient.TransientError("Cannot resolve conflicting transactions. You can retry "
                                                     "this transaction when the conflicting transaction is finished")]
    slept = []
    sink = BoltSink("h", username="u", password=PASSWORD, connect=server.connect, sleep=slept.append,
                    backoff_s=0.1)
    sink.write(BATCH)
    assert [entry[0] for entry in server.log] == [
        "connect", "execute", "execute", "rollback", "close",
        "connect", "execute", "execute", "commit"]
    assert slept == [0.1] and sink.batches == 1 and sink.attempts == 2


def test_bolt_reconnects_after_a_lost_connection_with_exponential_backoff(server):
    """A lost connection is the driver's ServiceUnavailable, a lost session its SessionExpired, a server's
    transient error its TransientError: each is retried, by its type, whatever the text says."""
    server.failures = [mgclient.TransientError("failed to receive chunk size: connection closed by peer"),
                       mgclient.InterfaceError("Query failed"), mgclient.OperationalError("connection reset")]
    slept = []
    BoltSink("h", connect=server.connect, sleep=slept.append, backoff_s=0.1, max_backoff_s=0.25).write(BATCH[:1])
    assert len(server.connects) == 4 and len(server.transactions) == 1   # one statement: applied on its own
    assert slept == [0.1, 0.2, 0.25]


def test_bolt_gives_up_after_the_bounded_number_of_tries(server):
    server.failures = [mgclient.TransientError("Serialization error")] * 10
    sink = BoltSink("h", retries=5, connect=server.connect, sleep=lambda s: None)
    with pytest.raises(SinkError, match=r"not applied after 5 attempt\(s\), transient error TransientError"):
        sink.write(BATCH[:1])
    assert server.count("commit") == 0 and server.count("rollback") == 5


def test_a_one_statement_batch_lost_with_its_connection_may_have_applied(server):
    """Alone in autocommit, the statement is its own commit: a connection lost during it (the driver's
    ServiceUnavailable) leaves its outcome unknown, where a server's answer (above) says it did not apply."""
    server.failures = [mgclient.OperationalError("connection reset")] * 2
    with pytest.raises(SinkError, match=r"may have been applied .* after 2 attempt\(s\), transient error"):
        BoltSink("h", retries=2, connect=server.connect, sleep=lambda s: None).write(BATCH[:1])


def test_a_one_statement_batch_applied_on_a_connection_that_cannot_leave_autocommit_is_applied_once(server):
    """The statement ran (autocommit: it is committed); the connection then refuses to go back to explicit
    transactions. The batch is applied, not retried; that connection is dropped and the next batch connects
    afresh."""
    connection = mgclient.Connection
    kept = connection.autocommit

    def refuse_leaving(conn, value):
        if conn._autocommit and not value:
            raise mgclient.InterfaceError("bad session")
        conn._autocommit = bool(value)
    connection.autocommit = property(kept.fget, refuse_leaving)
    try:
        sink = BoltSink("h", connect=server.connect, sleep=lambda s: pytest.fail("retried"))
        assert sink.write(BATCH[:1]) is Written.APPLIED
    finally:
        connection.autocommit = kept
    assert len(server.sent(autocommit=True)) == 1, "the statement ran once"
    assert sink.write(BATCH) is Written.APPLIED
    assert len(server.connections) == 2, "a fresh connection after the one left in autocommit"


def test_bolt_does_not_retry_a_query_error(server):
    server.failures = [None, mgclient.DatabaseError("Invalid input 'SETT'")]
    sink = BoltSink("h", connect=server.connect, sleep=lambda s: pytest.fail("slept"))
    with pytest.raises(SinkError, match=r"after 1 attempt\(s\), error DatabaseError: Invalid input 'SETT'"):
        sink.write(BATCH)
    assert server.count("commit") == 0 and server.count("rollback") == 1
    server.failures = []
    sink.write(BATCH)                                              # a fresh connection for the next batch
    assert len(server.connects) == 2 and server.count("commit") == 1


def test_bolt_never_shows_the_password(server):
    server.failures = [mgclient.DatabaseError(f"Authentication failure for ingest/{PASSWORD}")]
    sink = open_sink("bolt+ssc://memgraph:7687", CREDENTIALS)
    for text in (repr(sink), str(sink), repr(vars(sink))):
        assert PASSWORD not in text
    assert "ingest" in repr(sink)
    with pytest.raises(SinkError) as err:
        sink.write(BATCH[:1])
    assert PASSWORD not in str(err.value) and "Authentication failure" in str(err.value)
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_bolt_password_without_username_is_a_config_error(server):
    with pytest.raises(ConfigError, match="'bolt.password' is set but 'bolt.username' is not") as err:
        open_sink("bolt://h", {"bolt.password": PASSWORD})
    assert PASSWORD not in str(err.value)


def test_bolt_rejects_parameters_it_cannot_send_before_touching_the_server(server):
    with pytest.raises(SinkError, match=r"\$blob \(statement 0\): b'\\xff' is not UTF-8"):
        BoltSink("h", connect=server.connect).write([Statement("RETURN $blob", {"blob": b"\xff"})])
    assert server.connects == []


def test_adding_a_scheme_is_one_entry(monkeypatch):
    written = []

    class ListSink(NullSink):
        def write(self, statements):
            written.extend(statements)

    monkeypatch.setitem(sinks.SCHEMES, "list", sinks.Scheme(lambda parts, query, uri: None,
                                                             lambda settings, credentials: ListSink()))
    open_sink("list://").write([Statement("RETURN 1")])
    assert written == [Statement("RETURN 1")]


def test_falkordb_parameters_go_in_its_cypher_prefix_and_a_nul_is_refused_naming_the_parameter():
    """FalkorDB reads `\\\\` and `\\"` in a string but keeps `\\uXXXX` as text and ends a string at NUL: the
    literals carry every other character as it is (tests/integration/test_bolt_sink_graph.py reads them back)."""
    from stream_registry.graph.sinks.bolt_driver import inline_parameters

    text = inline_parameters("RETURN $s, $m", {"s": 'a"b\\c\u2028', "m": {"k": [1, 2.5, None], "odd key": True}})
    assert text == 'CYPHER s="a\\"b\\\\c\u2028" m={k: [1, 2.5, null], `odd key`: true} RETURN $s, $m'
    assert inline_parameters("RETURN 1", {}) == "RETURN 1"
    with pytest.raises(SinkError, match=r"parameter \$rows\[0\]\.name: a string holding NUL"):
        inline_parameters("RETURN 1", {"rows": [{"name": "a\x00b"}]})


def test_falkordb_literals_rendered_fast_are_the_named_renderings_and_a_refusal_still_names_the_value():
    """inline_parameters renders by exact type without naming each value (_fast); whatever it renders is what the
    named rendering (_literal) gives, and a value either refuses is named as before."""
    import datetime as dt
    from collections import OrderedDict

    from stream_registry.graph.sinks.bolt_driver import _literal, inline_parameters

    class Text(str):
        pass
    values = ["", 'a"b\\c\u2028', "\\u0041", 0, -1, 2 ** 63 - 1, -2 ** 63, 1.5, True, None, b"bytes",
              dt.date(2020, 1, 2), [1, "a", None], (1, 2), {"k": 1, "odd key": [True]}, {1: "one"},
              OrderedDict(a=1), Text("sub"), [{"x": 1.25, "y": {"z": "w"}}]]
    for value in values:
        assert inline_parameters("Q", {"p": value}) == f"CYPHER p={_literal(value, '$p')} Q", value
    for value, named in ((2 ** 63, r"\$p\[1\]: integer"), (float("nan"), r"\$p\[1\]: float nan"),
                         ({"a": {"b": "c\x00"}}, r"\$p\[1\]\.a\.b: a string holding NUL")):
        with pytest.raises(SinkError, match=named):
            inline_parameters("Q", {"p": [0, value]})
