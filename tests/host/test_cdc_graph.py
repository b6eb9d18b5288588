"""Debezium events from Debezium's documentation (support/debezium_corpus) and a sequence derived from them,
produced to Kafka, consumed by a real host (`mgstreams serve`) running the `debezium` transformation, written by
the stream's Bolt sink into the real graph engine (the `graph_server` fixture's FalkorDB, `?engine=falkordb`):
the graph must hold what the table holds, and a second run of the same records (a replay) changes nothing.
"""
from __future__ import annotations

import json
import uuid

from broker_support import PRODUCER_CONFIG
from confluent_kafka import Producer
from debezium_derived import MIRROR, Graph, event, sample
from host_helpers import HostProcess, http
from stream_helpers import FAST_REJOIN, wait_until

PLACEHOLDER = "__debezium_unavailable_value"


def _pg(op, row, lsn, **source):
    name = {"c": "postgresql-change-create-L763", "u": "postgresql-change-update-L1045", "r":
            "postgresql-change-create-L763", "d": "postgresql-change-delete-L1150"}[op]
    return {"id": row["id"]}, event(name, op, row, lsn=lsn, **source)


def _history():
    """A table's life as the PostgreSQL connector writes it, with what else shares its topics; and the table at
    its end."""
    records = [
        _pg("r", {"id": 1, "first_name": "Anne", "bio": "long text"}, 100, snapshot="first"),
        _pg("r", {"id": 2, "first_name": "Bob", "bio": "b"}, 100, snapshot="true"),
        _pg("r", {"id": 3, "first_name": "Cleo", "bio": "c"}, 100, snapshot="last"),
        (None, sample("postgresql-transaction-begin-L457")),
        _pg("u", {"id": 1, "first_name": "Anne Marie", "bio": PLACEHOLDER}, 200),   # TOAST: bio unchanged
        _pg("c", {"id": 4, "first_name": "Dan", "bio": "d"}, 300),
        _pg("d", {"id": 2}, 400),
        ({"id": 2}, None),                                                          # the delete's tombstone
        (None, sample("postgresql-transaction-end-L457-1")),
        ({"serverName": "PostgreSQL_server"}, sample("heartbeat-value")),
        _pg("u", {"id": 2, "first_name": "Bob replayed", "bio": "b"}, 150),        # older than the delete
        _pg("u", {"id": 3, "first_name": "Cleo stale", "bio": "c"}, 50),           # older than the snapshot
        ({"id": 9}, event("postgresql-change-create-L763", "c", {"id": 9}, lsn=500, table="secrets")),
    ]
    table = {1: {"id": 1, "first_name": "Anne Marie", "bio": "long text"},
             3: {"id": 3, "first_name": "Cleo", "bio": "c"},
             4: {"id": 4, "first_name": "Dan", "bio": "d"}}
    return records, table


def test_a_tables_life_through_a_host_leaves_the_real_graph_equal_to_the_table(kafka, graph_server, tmp_path):
    graph = Graph(graph_server)   # cleared
    records, table = _history()
    topic = kafka.new_topic(partitions=1, prefix="dbserver1")
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, **PRODUCER_CONFIG})
    for k, v in records:
        producer.produce(topic, partition=0, key=None if k is None else json.dumps(k).encode(),
                         value=None if v is None else json.dumps(v).encode())
    producer.flush(30)

    host = HostProcess(tmp_path / "state", env={"MGSTREAMS_ALLOWED_HOSTS": "localhost,127.0.0.0/8"}).start()
    try:
        with http(host) as api:
            for name in ("mirror", "replay"):   # the replay: the same records again, from the start
                created = api.post("/streams", json={
                    "name": name, "topics": [topic], "bootstrap_servers": kafka.bootstrap_servers,
                    "transform": MIRROR, "sink": f"{graph_server.bolt_uri}?engine=falkordb", "batch_size": 4,
                    "consumer_group": f"g_{uuid.uuid4().hex[:8]}", "configs": FAST_REJOIN,
                    "transform.options": {"tables": ["public.customers"]}})
                assert created.status_code == 201, created.text
                api.put(f"/streams/{name}/start").raise_for_status()
                wait_until(lambda n=name: api.get(f"/streams/{n}/offsets").json()[0]["committed_offset"] ==
                           len(records), 90, what=f"every record committed by {name}",
                           describe=lambda n=name: api.get(f"/streams/{n}").json())
                stream = api.get(f"/streams/{name}").json()
                assert stream["error"] is None, stream
                api.put(f"/streams/{name}/stop").raise_for_status()
                assert graph.table("public.customers") == table
                assert graph.count("MATCH (n:`public.secrets`) RETURN count(n) AS c") == 0   # not mirrored
    finally:
        host.stop()
