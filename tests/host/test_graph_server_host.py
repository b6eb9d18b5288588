"""Streams writing to a real graph server (FalkorDB over Bolt 5, tests/support/graph_server.py) through a real host
(`mgstreams serve` and its stream processes, the neo4j driver inside them): exactly-once offsets stored in the graph
with each batch, a user editing them (the stream realigns to what the graph says), two tasks writing one graph,
and the server restarting under a running stream.

FalkorDB has no transactions (tests/integration/test_graph_engine.py): a batch's statements apply one by one and its
offsets statements last, so a batch cut short by a failure is applied again from its start. These tests use what
holds there: a stream whose statements are idempotent loses nothing and doubles nothing across a restart; a stream
of CREATEs is exactly once while no batch is cut short (docs: exactly-once).
"""
from __future__ import annotations

from collections import Counter

import pytest
from configs import MERGE, stream_body
from host_helpers import HostProcess, http
from stream_helpers import FAST_REJOIN, wait_until

RECORD = "stream_helpers.offsets_transform"   # one CREATE (:Msg {topic, partition, offset}) per message


@pytest.fixture(scope="module")
def graph_host(tmp_path_factory, quick_rebalance):
    host = HostProcess(tmp_path_factory.mktemp("graph_host") / "state",
                       env={"MGSTREAMS_ALLOWED_HOSTS": "127.0.0.0/8"}).start()
    yield host
    host.stop()


def body(kafka, graph_server, topic: str, name: str, **fields) -> dict:
    return stream_body(kafka, topic, name=name, group="graph", sink=f"{graph_server.bolt_uri}?engine=falkordb",
                       batch_size=10, batch_interval_ms=20, configs=FAST_REJOIN, delivery="exactly_once",
                       **fields)


def created(graph_server, topic: str) -> Counter:
    """How many :Msg nodes each (partition, offset) of `topic` has."""
    rows = graph_server.query("MATCH (m:Msg {topic: $t}) RETURN m.partition AS p, m.offset AS o", {"t": topic})
    return Counter((row["p"], row["o"]) for row in rows)


def stored(graph_server, name: str) -> dict:
    rows = graph_server.query("MATCH (o:MgstreamsOffset {stream: $s}) RETURN o.partition AS p, o.next_offset AS n",
                              {"s": name})
    return {row["p"]: row["n"] for row in rows}


def test_offsets_are_stored_with_each_batch_and_a_user_edit_realigns_the_stream(kafka, graph_server, graph_host):
    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 40, partitions=1)
    with http(graph_host) as api:
        api.post("/streams", json=body(kafka, graph_server, topic, "g_edit", transform=RECORD)).raise_for_status()
        api.put("/streams/g_edit/start").raise_for_status()
        wait_until(lambda: stored(graph_server, "g_edit") == {0: 40}, 90, what="offsets 40 in the graph",
                   describe=lambda: (stored(graph_server, "g_edit"), api.get("/streams/g_edit").json()))
        assert created(graph_server, topic) == Counter({(0, i): 1 for i in range(40)})
        # a user moves the graph's offsets back to 30: the graph is the truth, the stream realigns there
        graph_server.query("MATCH (o:MgstreamsOffset {stream: 'g_edit'}) SET o.next_offset = 30")
        kafka.produce(topic, 5, partitions=1)
        wait_until(lambda: stored(graph_server, "g_edit") == {0: 45}, 90, what="offsets 45 after the edit",
                   describe=lambda: (stored(graph_server, "g_edit"), api.get("/streams/g_edit").json()))
        api.put("/streams/g_edit/stop").raise_for_status()
    counts = created(graph_server, topic)
    assert counts == Counter({**{(0, i): 1 for i in range(30)}, **{(0, i): 2 for i in range(30, 40)},
                              **{(0, i): 1 for i in range(40, 45)}})


def test_two_tasks_write_one_graph_each_message_once(kafka, graph_server, graph_host):
    topic = kafka.new_topic(partitions=4)
    kafka.produce(topic, 200, partitions=4)
    with http(graph_host) as api:
        api.post("/streams", json=body(kafka, graph_server, topic, "g_tasks", transform=RECORD, tasks=2)
                 ).raise_for_status()
        api.put("/streams/g_tasks/start").raise_for_status()
        wait_until(lambda: stored(graph_server, "g_tasks") == {p: 50 for p in range(4)}, 120,
                   what="50 per partition in the graph",
                   describe=lambda: (stored(graph_server, "g_tasks"), api.get("/streams/g_tasks").json()))
        api.put("/streams/g_tasks/stop").raise_for_status()
    assert created(graph_server, topic) == Counter({(p, i): 1 for p in range(4) for i in range(50)})


def test_a_server_restart_mid_stream_loses_nothing_and_doubles_nothing(kafka, graph_server, graph_host):
    """Idempotent statements (the default transformation's MERGE), exactly-once offsets: the stream retries
    through the restart (its connection is lost, a transient failure) and goes on where the graph says."""
    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 100, partitions=1)
    with http(graph_host) as api:
        api.post("/streams", json=body(kafka, graph_server, topic, "g_restart", transform=MERGE)).raise_for_status()
        api.put("/streams/g_restart/start").raise_for_status()
        wait_until(lambda: stored(graph_server, "g_restart").get(0, 0) >= 10, 90, what="a first batch stored")
        graph_server.restart()
        kafka.produce(topic, 100, partitions=1)
        wait_until(lambda: stored(graph_server, "g_restart") == {0: 200}, 120, what="offsets 200 after the restart",
                   describe=lambda: (stored(graph_server, "g_restart"), api.get("/streams/g_restart").json()))
        api.put("/streams/g_restart/stop").raise_for_status()
    rows = graph_server.query("MATCH (m:KafkaMessage {topic: $t}) RETURN m.offset AS o", {"t": topic})
    assert sorted(row["o"] for row in rows) == list(range(200))
