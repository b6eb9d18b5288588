"""The Debezium built-in transformation (builtin_transformations.debezium, its logic in cdc.py), on events written
from Debezium's documented PostgreSQL and MySQL envelopes (support/debezium_events.py): JSON with and without the
schema/payload wrapper, and Avro through the Schema Registry stand-in with confluent-kafka's real serializer."""
from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from debezium_events import (
    AVRO_ENVELOPE,
    AVRO_KEY,
    customer,
    encode,
    envelope,
    key,
    mysql_source,
    pg_source,
    pg_story,
    wrapped,
)
from hypothesis import given
from hypothesis import strategies as st
from schema_registry import SchemaRegistry

from stream_registry.builtin_transformations.cdc import POSITION_PROPERTY, source_position
from stream_registry.errors import TransformError
from stream_registry.formats import Decoder
from stream_registry.graph.transform import Message, load_transformation, run_transformation, wrap
from stream_registry.graph.unwind import ROWS_PARAMETER

DEBEZIUM = "stream_registry.builtin_transformations.debezium"


def _messages(pairs, topic="dbserver1.inventory.customers", wrap_json=False):
    out = []
    for offset, (k, v) in enumerate(pairs):
        if wrap_json:
            k = None if k is None else wrapped(k)
            v = None if v is None else wrapped(v)
        out.append(Message(topic, 0, offset, encode(k), encode(v), 0))
    return out


def _run(messages, options=None):
    return run_transformation(load_transformation(DEBEZIUM, options=options), messages)


def _rows(statement):
    return statement.parameters[ROWS_PARAMETER]


@pytest.mark.parametrize("wrap_json", [False, True], ids=["plain JSON", "schema/payload wrapper"])
def test_a_postgres_tables_life_becomes_upserts_a_delete_and_nothing_for_the_tombstone(wrap_json):
    statements = _run(_messages(pg_story(), wrap_json=wrap_json))
    upsert, delete = statements   # one UNWIND for the four row writes, one for the delete; the tombstone: nothing
    assert upsert.query.startswith(f"UNWIND ${ROWS_PARAMETER} AS ") and "MERGE (n:`customers` {`id`:" in upsert.query
    assert "SET n = mgstreams_row.properties" in upsert.query   # replaced, so a column that became absent goes
    assert "<= mgstreams_row.position" in upsert.query            # an older event changes nothing
    rows = _rows(upsert)
    assert [r["key"] for r in rows] == [{"id": 1}, {"id": 2}, {"id": 3}, {"id": 1}]
    assert rows[0]["properties"] == {"id": 1, "first_name": "Anne", "last_name": "Kretchmar",
                                     "email": "annek@noanswer.org", POSITION_PROPERTY: rows[0]["position"]}
    assert "email" not in rows[3]["properties"] and rows[3]["properties"]["first_name"] == "Anne Marie"
    assert rows[0]["position"] == rows[1]["position"] < rows[2]["position"] < rows[3]["position"]
    assert "DETACH DELETE n" in delete.query and _rows(delete) == [{"key": {"id": 2}, "position": "pg:"
                                                                    + "4000".zfill(20)}]
    assert "<= mgstreams_row.position" in delete.query   # a delete older than the node's write leaves it


def test_a_replayed_batch_makes_the_same_statements_and_positions_order_out_of_order_deliveries():
    story = _messages(pg_story())
    assert _run(story) == _run(story)   # MERGE and SET n = row: a redelivery rewrites the same values
    newer, older = _messages([
        (key(1), envelope("u", pg_source(9000), after=customer(1, "Newest"))),
        (key(1), envelope("u", pg_source(5000), after=customer(1, "Stale"))),   # delivered late
    ])
    rows = _rows(_run([newer, older])[0])
    assert rows[1]["position"] < rows[0]["position"]   # the guard (node position <= row position) skips it


def test_mysql_events_are_ordered_by_binlog_file_position_and_row():
    events = [(key(1), envelope("c", mysql_source(154, 0), after=customer(1, "A"))),
              (key(2), envelope("c", mysql_source(154, 1), after=customer(2, "B"))),
              (key(1), envelope("u", mysql_source(900, 0), after=customer(1, "A2"))),
              (key(1), envelope("u", mysql_source(12, 0, file="mysql-bin.000004"), after=customer(1, "A3")))]
    rows = _rows(_run(_messages(events, topic="mysql-server-1.inventory.customers"))[0])
    positions = [r["position"] for r in rows]
    assert positions == sorted(positions) and len(set(positions)) == 4


@given(st.lists(st.integers(0, 2 ** 63 - 1), min_size=2, max_size=6))
def test_postgres_positions_sort_as_their_lsns(lsns):
    texts = [source_position({"lsn": lsn}, {}) for lsn in lsns]
    assert sorted(texts) == [source_position({"lsn": lsn}, {}) for lsn in sorted(lsns)]


@given(st.lists(st.tuples(st.integers(1, 999_999), st.integers(0, 2 ** 40), st.integers(0, 10_000)),
                min_size=2, max_size=6))
def test_mysql_positions_sort_as_file_pos_and_row(places):
    def text(place):
        return source_position({"file": f"mysql-bin.{place[0]:06d}", "pos": place[1], "row": place[2]}, {})
    assert sorted(text(p) for p in places) == [text(p) for p in sorted(places)]


def test_truncate_is_ignored_by_default_or_deletes_the_tables_nodes_older_than_it():
    truncate = [(None, envelope("t", pg_source(7000)))]   # a truncate has a null key
    assert _run(_messages(truncate)) == []
    [statement] = _run(_messages(truncate), options={"truncate": "delete", "labels": {"inventory.customers": "Customer"}})
    assert statement.query.startswith("MATCH (n:`Customer`) WHERE") and "DETACH DELETE n" in statement.query
    assert statement.parameters == {"position": "pg:" + "7000".zfill(20)}


def test_labels_are_renamed_and_foreign_keys_become_relationships():
    options = {"labels": {"inventory.orders": "Order", "customers": "Customer"},
               "relationships": {"inventory.orders": {"purchaser": {"type": "PURCHASED_BY", "label": "Customer",
                                                                    "key": "id"}}}}
    events = [(key(10), envelope("c", pg_source(100, table="orders"), after={"id": 10, "purchaser": 1})),
              (key(11), envelope("c", pg_source(200, table="orders"), after={"id": 11, "purchaser": None}))]
    upsert, unlink, link = _run(_messages(events, topic="dbserver1.inventory.orders"), options)
    assert "MERGE (n:`Order` {`id`:" in upsert.query
    # a relationship to another target, or any when the column became null, goes; the one it names is MERGEd
    assert "-[old:`PURCHASED_BY`]->(m)" in unlink.query and unlink.query.endswith("DELETE old")
    assert "(mgstreams_row.target IS NULL OR m.`id` <> mgstreams_row.target)" in unlink.query
    assert "MERGE (m:`Customer` {`id`: mgstreams_row.target})" in link.query
    assert "MERGE (n)-[:`PURCHASED_BY`]->(m)" in link.query and "mgstreams_row.target IS NOT NULL" in link.query
    for statement in (unlink, link):   # only for the event the node now holds
        assert "n.`_debezium_position` = mgstreams_row.position" in statement.query
        assert [r["target"] for r in _rows(statement)] == [1, None]


def test_json_converter_decimals_become_exact_text():
    schema = {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": [
        {"field": "id", "type": "int32"},
        {"field": "price", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
         "parameters": {"scale": "2", "connect.decimal.precision": "10"}}]}]}
    value = wrapped(envelope("c", pg_source(100, table="products"), after={"id": 1, "price": "AOo="}), schema)
    [statement] = _run([Message("p", 0, 0, encode(wrapped(key(1))), encode(value), 0)])
    assert _rows(statement)[0]["properties"]["price"] == "2.34"   # 0x00ea = 234, scale 2


def test_an_event_with_no_key_is_refused_naming_the_record_and_nothing_is_written():
    event = envelope("c", pg_source(100), after=customer(5, "Keyless"))
    with pytest.raises(TransformError, match=r"record dbserver1.inventory.customers:0@0: the Debezium event "
                                             r"\(op 'c' on postgres.inventory.customers\) has no key"):
        _run(_messages([(None, event)]))
    with pytest.raises(TransformError, match=r"record t:0@3: value.op is None"):
        _run([Message("t", 0, 3, b'{"id": 1}', b'{"id": 1, "name": "not an event"}', 0)])
    with pytest.raises(TransformError, match=r"transform.options: unknown key 'label'"):
        _run(_messages(pg_story()), {"label": {}})


def test_avro_debezium_events_through_the_registry_make_the_same_statements_as_json():
    story = pg_story()[:4]
    with SchemaRegistry() as server:
        client = SchemaRegistryClient({"url": server.url})
        topic = "dbserver1.inventory.customers"
        keys = AvroSerializer(client, json.dumps(AVRO_KEY))
        values = AvroSerializer(client, json.dumps(AVRO_ENVELOPE))
        decoder = Decoder("avro", "avro", server.url)

        class Raw:   # what a consumed confluent_kafka.Message offers
            def __init__(self, offset, k, v):
                self.o, self.k, self.v = offset, k, v
            def topic(self): return topic                      # noqa: E704
            def partition(self): return 0                      # noqa: E704
            def offset(self): return self.o                    # noqa: E704
            def key(self): return self.k                       # noqa: E704
            def value(self): return self.v                     # noqa: E704
            def timestamp(self): return (1, 0)                 # noqa: E704

        avro = [wrap(Raw(i, keys(k, SerializationContext(topic, MessageField.KEY)),
                         values(v, SerializationContext(topic, MessageField.VALUE))), decoder)
                for i, (k, v) in enumerate(story)]
        assert _run(avro) == _run(_messages(story))
