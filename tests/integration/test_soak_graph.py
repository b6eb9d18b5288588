"""The soak's statement for its tasks stream (bench/soak_transform.GRAPH_QUERY) on the real graph server (FalkorDB,
tests/support/graph_server.py), through the Bolt sink: applying a batch again changes nothing (what FalkorDB's
lack of rollback needs: the sink retries a batch cut short from its start), a delivery by another batch adds its
tag, and the oracle (bench/soak/graph.graph_records) reads the deliveries back in order."""
from __future__ import annotations

import uuid

import pytest

from bench.soak.graph import graph_records
from bench.soak.oracle import check_partition
from bench.soak_transform import GRAPH_QUERY, REFUSED_BY_SINK
from stream_registry.errors import SinkError
from stream_registry.graph.sinks import open_sink
from stream_registry.graph.statement import Statement


@pytest.fixture
def sink(graph_server):
    sink = open_sink(f"{graph_server.bolt_uri}?engine=falkordb&retries=2")
    yield sink
    sink.close()


def batch(topic: str, offsets, tag: str) -> list[Statement]:
    return [Statement(GRAPH_QUERY, {"topic": topic, "partition": 0, "offset": o, "seq": 100 + o, "batch": tag})
            for o in offsets]


def test_the_soak_statement_is_idempotent_and_keeps_every_delivering_batch_in_order(graph_server, sink):
    topic = f"t{uuid.uuid4().hex[:8]}"
    sink.write(batch(topic, range(0, 4), "7-1-1000"))
    sink.write(batch(topic, range(0, 4), "7-1-1000"))      # the same batch again (a retry): nothing changes
    sink.write(batch(topic, range(2, 6), "8-1-2000"))      # another batch delivers 2 and 3 again
    with pytest.raises(SinkError):       # a refused batch's failing statement goes first: nothing is left
        sink.write([Statement(REFUSED_BY_SINK["query"], REFUSED_BY_SINK["parameters"]), *batch(topic, [9], "9-1-3000")])
    rows = graph_server.query("MATCH (m:SoakMsg {topic: $t}) RETURN m.partition AS p, m.offset AS o, m.seq AS s, "
                              "m.batches AS b ORDER BY o", {"t": topic})
    assert [(r["o"], r["b"]) for r in rows] == [(0, ["7-1-1000"]), (1, ["7-1-1000"]), (2, ["7-1-1000", "8-1-2000"]),
                                                (3, ["7-1-1000", "8-1-2000"]), (4, ["8-1-2000"]), (5, ["8-1-2000"])]
    got = graph_records([(r["p"], r["o"], r["s"], r["b"]) for r in rows], topic)
    v = check_partition(got.held[(topic, 0)], [], 6, {o: 100 + o for o in range(6)})
    assert (got.corrupt, v.lost, v.mismatched, v.stale, v.duplicates) == (0, 0, 0, 2, 0)   # 2 is no commit point
