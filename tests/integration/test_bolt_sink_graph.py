"""The Bolt sink against a real graph server (FalkorDB over Bolt 5, tests/support/graph_server.py), through the
sink's own interface: folded UNWIND batches read back, what a failed batch leaves, exactly-once offsets written
with the batch and compared-and-set, a user editing them, the server restarting under a sink, and a sink closing
without leaving the server unusable. Host-level runs of the same: tests/host/test_graph_server_host.py."""
from __future__ import annotations

import uuid

import pytest

from stream_registry.errors import SinkError, StoredOffsetsConflict
from stream_registry.graph.offset_store import offset_statements
from stream_registry.graph.sinks import Written, open_sink
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
    assert len(sent) == 3 and sent[1].startswith("UNWIND $mgstreams_rows AS mgstreams_row MERGE")
    assert graph_server.query(f"MATCH (n:{name}) RETURN count(n) AS n") == [{"n": 1000}]
