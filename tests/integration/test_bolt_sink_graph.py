"""The Bolt sink against a real graph server (FalkorDB over Bolt 5, tests/support/graph_server.py), through the
sink's own interface: folded UNWIND batches read back, what a failed batch leaves, exactly-once offsets written
with the batch and compared-and-set, a user editing them, the server restarting under a sink, and a sink closing
without leaving the server unusable, and two tasks' interleaved writes (no write conflict on this engine: it
serialises writes; Memgraph's write-write conflict stays on the Bolt stand-in, named as such). Host-level runs of
the same: tests/host/test_graph_server_host.py."""
from __future__ import annotations

import uuid

import pytest

from stream_registry.errors import SinkError, StoredOffsetsConflict
from stream_registry.graph.offset_store import offset_statements
from stream_registry.graph.sinks import Written, open_sink
from stream_registry.graph.sinks.bolt import BoltSink
from stream_registry.graph.statement import Statement
from stream_registry.model import PartitionKey


@pytest.fixture
def sink(graph_server):
    sink = open_sink(f"{graph_server.bolt_uri}?engine=falkordb&retries=3")
    yield sink
    sink.close()


def label() -> str:
    return f"S{uuid.uuid4().hex[:8]}"


def merges(name: str, values) -> list[Statement]:
    return [Statement(f"MERGE (n:{name} {{k: $k}}) SET n.v = $v", {"k": k, "v": v}) for k, v in values]


def test_a_folded_batch_is_read_back_whatever_its_values_hold(graph_server, sink):
    """Values FalkorDB's Bolt parameters would break (a quote, 15 digits, a line separator) and a batch far past
    its 4096-byte parameter buffer: sent in the query text, they arrive as they were."""
    name = label()
    values = ["it's", 'say "hi"', "back\\slash", "tab\tline\nbreak\u2028", 0.1234567891234, 2 ** 62, "ü€" * 30]
    statements = merges(name, [(i, values[i % len(values)]) for i in range(3000)])
    assert sink.write(statements) is Written.APPLIED
    rows = graph_server.query(f"MATCH (n:{name}) RETURN n.k AS k, n.v AS v ORDER BY k")
    assert [row["v"] for row in rows] == [values[i % len(values)] for i in range(3000)]


def test_a_batch_that_fails_part_way_leaves_the_statements_before_the_failing_one(graph_server, sink):
    """FalkorDB has no transactions: the statements before the refused one stay (on Memgraph, nothing would)."""
    name = label()
    statements = [*merges(name, [(1, "a"), (2, "b")]),
                  Statement(f"CREATE (:{name} {{bad: $m}})", {"m": {"map": 1}}),   # refused: a map property
                  *merges(name, [(3, "c")])]
    with pytest.raises(SinkError, match="was not applied") as refused:
        sink.write(statements)
    assert not refused.value.transient
    assert graph_server.query(f"MATCH (n:{name}) RETURN n.k AS k ORDER BY k") == [{"k": 1}, {"k": 2}]


def test_exactly_once_offsets_are_written_with_the_batch_and_compared_and_set(graph_server, sink):
    name, stream = label(), f"s_{uuid.uuid4().hex[:6]}"
    tp = PartitionKey("t", 0)
    batch = [*merges(name, [(1, "a"), (2, "b")]), *offset_statements(stream, {tp: 2})]
    assert sink.write(batch, expect={tp: None}) is Written.APPLIED
    assert sink.stored_offsets(stream) == {tp: 2}
    assert sink.write(batch, expect={tp: None}) is Written.ALREADY_APPLIED   # a retried batch writes nothing
    following = [*merges(name, [(3, "c")]), *offset_statements(stream, {tp: 3})]
    with pytest.raises(StoredOffsetsConflict) as conflict:   # it does not continue from 2
        sink.write(following, expect={tp: 1})
    assert conflict.value.stored == {tp: 2}
    assert graph_server.query(f"MATCH (n:{name}) RETURN count(n) AS n") == [{"n": 2}]
    # a user moves the stored offset: the next batch is refused with what is stored now (the stream realigns)
    graph_server.query("MATCH (o:MgstreamsOffset {stream: $s}) SET o.next_offset = 7", {"s": stream})
    with pytest.raises(StoredOffsetsConflict) as edited:
        sink.write(following, expect={tp: 2})
    assert edited.value.stored == {tp: 7}
    graph_server.query("MATCH (o:MgstreamsOffset {stream: $s}) DELETE o", {"s": stream})
    assert sink.stored_offsets(stream) == {}


def test_a_sink_closes_without_leaving_the_server_unusable(graph_server):
    """FalkorDB wedges on a client's GOODBYE (test_graph_engine.py): the sink's close must not send one. Fails
    with a plain driver close: the second sink's connection gets no answer."""
    for value in ("first", "second", "third"):
        sink = open_sink(f"{graph_server.bolt_uri}?engine=falkordb&retries=1")
        sink.check()
        sink.write(merges(label(), [(1, value)]))
        sink.close()
    assert graph_server.query("RETURN 1 AS one") == [{"one": 1}]


def test_a_write_after_the_server_restarted_reconnects_and_lands_once(graph_server, sink):
    name = label()
    sink.write(merges(name, [(1, "before")]))
    graph_server.restart()
    assert sink.write(merges(name, [(1, "after"), (2, "new")])) is Written.APPLIED
    assert graph_server.query(f"MATCH (n:{name}) RETURN n.k AS k, n.v AS v ORDER BY k") == [
        {"k": 1, "v": "after"}, {"k": 2, "v": "new"}]


def test_json_nodes_with_nested_objects_land_on_an_engine_without_map_properties(graph_server, sink):
    """json_nodes stores an object field as its JSON text (FalkorDB refuses a map property; Memgraph stores one):
    the same graph on both. Fails with the object passed through: the server refuses the batch."""
    from stream_registry.builtin_transformations import json_nodes
    from stream_registry.graph.transform import Message, run_transformation

    topic = f"t{uuid.uuid4().hex[:8]}"
    payloads = [b'{"id": 1, "obj": {"b": 1}, "objs": [{"x": "y"}], "nums": [1, 2]}', b'{"id": 2, "s": "plain"}']
    statements = run_transformation(json_nodes, [Message(topic, 0, offset, None, payload, 1_700_000_000_000)
                                                 for offset, payload in enumerate(payloads)])
    sink.write(statements)
    rows = graph_server.query("MATCH (n:KafkaRecord {topic: $t}) RETURN properties(n) AS p ORDER BY n.offset",
                              {"t": topic})
    assert [{k: v for k, v in row["p"].items() if k not in ("topic", "partition", "offset")} for row in rows] == [
        {"id": 1, "obj": '{"b":1}', "objs": '[{"x":"y"}]', "nums": [1, 2]}, {"id": 2, "s": "plain"}]


def test_a_1000_message_batch_is_a_handful_of_round_trips(graph_server, monkeypatch):
    """Folding on the real server: an exactly-once batch of 1000 statements and its offset is the stored offsets'
    read, one UNWIND, and the offset write (each statement a round trip: FalkorDB runs them one by one)."""
    from stream_registry.graph.sinks import bolt, bolt_driver

    sent: list[str] = []

    def counted(**kwargs):
        connection = bolt_driver.connect_driver(**kwargs)
        run = connection._run
        connection._run = lambda query, parameters: sent.append(query) or run(query, parameters)
        return connection

    monkeypatch.setattr(bolt, "connect_driver", counted)
    name, stream = label(), f"s_{uuid.uuid4().hex[:6]}"
    sink = open_sink(f"{graph_server.bolt_uri}?engine=falkordb")
    try:
        batch = [*merges(name, [(i, i) for i in range(1000)]),
                 *offset_statements(stream, {PartitionKey("t", 0): 1000})]
        sink.write(batch, expect={PartitionKey("t", 0): None})
    finally:
        sink.close()
    # (the batch's parameters rendered into FalkorDB's `CYPHER name=<literal> ...` prefix: BoltSink.prepare)
    assert len(sent) == 3 and sent[1].startswith("CYPHER mgstreams_rows=[")
    assert " UNWIND $mgstreams_rows AS mgstreams_row MERGE" in sent[1]
    assert graph_server.query(f"MATCH (n:{name}) RETURN count(n) AS n") == [{"n": 1000}]


class _AfterFirstStatement:
    """A sink connection that runs `between` once, right after its first statement (an exactly-once batch's read of
    the stored offsets): another task's write lands between a batch's compare-and-set read and its statements."""

    def __init__(self, connection, between):
        self._connection, self._between = connection, between

    @property
    def autocommit(self):
        return self._connection.autocommit

    @autocommit.setter
    def autocommit(self, value) -> None:
        self._connection.autocommit = value

    def cursor(self):
        return _AfterFirstCursor(self, self._connection.cursor())

    def __getattr__(self, name):
        return getattr(self._connection, name)


class _AfterFirstCursor:
    def __init__(self, owner: _AfterFirstStatement, cursor):
        self._owner, self._cursor = owner, cursor

    def execute(self, query, parameters=None) -> None:
        self._cursor.execute(query, parameters)
        between, self._owner._between = self._owner._between, None
        if between is not None:
            between()

    def fetchall(self):
        return self._cursor.fetchall()


def _zombie_and_owner(connect_zombie, owner, stream: str, name: str):
    """Two tasks of one stream on one partition, both believing the sink stores 2: the zombie (its partition
    already taken over) reads the stored offsets, then the new owner writes keys 2..4 and offsets 5, then the
    zombie writes keys 2..3 and offsets 4. The zombie's sink and the batch it writes."""
    tp = PartitionKey("t", 0)
    owner.write([*merges(name, [(0, "first"), (1, "first")]), *offset_statements(stream, {tp: 2})],
                expect={tp: None})
    owned = [*merges(name, [(2, "owner"), (3, "owner"), (4, "owner")]), *offset_statements(stream, {tp: 5})]
    zombie = BoltSink("graph", connect=lambda **kwargs: _AfterFirstStatement(
        connect_zombie(**kwargs), lambda: owner.write(owned, expect={tp: 2})), sleep=lambda s: None,
        engine=owner.engine)
    return zombie, [*merges(name, [(2, "zombie"), (3, "zombie")]), *offset_statements(stream, {tp: 4})]


def test_two_tasks_never_meet_a_write_conflict_on_falkordb_which_serialises_writes(graph_server):
    """Write conflicts between two tasks cannot be produced on FalkorDB: it runs one write at a time and has no
    transactions, so a batch that interleaves with another task's never fails with a conflict. Memgraph's
    write-write conflict stays on the stand-in, named as such (the next test). What this engine does instead: a
    zombie task whose compare-and-set read came before the new owner's write writes its batch and its offsets over
    the owner's (the compare-and-set is a read before the batch there; docs: Graph engines)."""
    from stream_registry.graph.sinks import bolt_driver

    name, stream = label(), f"s_{uuid.uuid4().hex[:6]}"
    owner = open_sink(f"{graph_server.bolt_uri}?engine=falkordb")
    connect = lambda **kwargs: bolt_driver.connect_driver(**{**kwargs, "port": graph_server.bolt_port,  # noqa: E731
                                                            "host": "127.0.0.1"})
    zombie, batch = _zombie_and_owner(connect, owner, stream, name)
    try:
        assert zombie.write(batch, expect={PartitionKey("t", 0): 2}) is Written.APPLIED
        assert zombie.attempts == 1, "no conflict, no retry"
        assert owner.stored_offsets(stream) == {PartitionKey("t", 0): 4}, "the zombie's offsets over the owner's"
        rows = graph_server.query(f"MATCH (n:{name}) RETURN n.k AS k, n.v AS v ORDER BY k")
        assert [(row["k"], row["v"]) for row in rows] == [(0, "first"), (1, "first"), (2, "zombie"),
                                                          (3, "zombie"), (4, "owner")]
    finally:
        zombie.close()
        owner.close()


def test_a_write_conflict_between_two_tasks_on_the_memgraph_standin_is_retried_into_a_realignment(tmp_path):
    """On the Bolt stand-in (tests/support/mgclient_standin, MGCLIENT_STANDIN_SHARED: one database for both tasks,
    with Memgraph's snapshot isolation and write-write conflicts), because FalkorDB serialises writes and cannot
    show one (the test above). The zombie's offset write conflicts with the owner's committed one (TransientError),
    its transaction is rolled back and retried, and the retry's compare-and-set reads the owner's offsets: a
    StoredOffsetsConflict (the zombie's stream realigns), nothing of the zombie's batch applied."""
    from mgclient_standin.mgclient import Server

    journal = tmp_path / "memgraph.jsonl"
    name, stream = label(), "s_conflict"
    owner = BoltSink("memgraph", connect=Server(0, str(journal), True, shared=True).connect, sleep=lambda s: None)
    zombie_server = Server(0, str(journal), True, shared=True)
    zombie, batch = _zombie_and_owner(zombie_server.connect, owner, stream, name)
    with pytest.raises(StoredOffsetsConflict) as conflict:
        zombie.write(batch, expect={PartitionKey("t", 0): 2})
    assert conflict.value.stored == {PartitionKey("t", 0): 5}
    assert zombie.attempts == 2 and zombie_server.commits == 0, "the conflict retried, nothing of it committed"
    assert owner.stored_offsets(stream) == {PartitionKey("t", 0): 5}


def test_a_sink_dropped_without_close_leaves_the_server_usable(tmp_path):
    """A sink that is never closed (a stream process ending without its stop path, its objects collected or torn
    down at exit) must not say GOODBYE either: the driver's destructors close their connections with one, which
    wedges FalkorDB (test_graph_engine.py). On a server of its own: a wedge would stop every other test's."""
    import gc

    import neo4j
    from graph_server import start_graph_server

    server = start_graph_server(tmp_path)
    try:
        sink = open_sink(f"{server.bolt_uri}?engine=falkordb&retries=1")
        sink.write(merges(label(), [(1, "dropped")]))
        del sink
        gc.collect()
        with neo4j.GraphDatabase.driver(server.bolt_uri, auth=None, connection_timeout=3,
                                        connection_acquisition_timeout=5) as driver:
            try:
                driver.verify_connectivity()
            finally:
                from stream_registry.graph.sinks.bolt_driver import kill_connections
                kill_connections(driver)
        assert server.query("RETURN 1 AS one") == [{"one": 1}]
    finally:
        server.close()
