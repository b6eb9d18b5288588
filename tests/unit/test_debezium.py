"""The Debezium built-in transformation (builtin_transformations.debezium, its logic in the cdc package), the
statements it makes, on events written
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
MIRROR = {"tables": ["inventory.customers", "inventory.orders", "inventory.products"]}


def _messages(pairs, topic="dbserver1.inventory.customers", wrap_json=False):
    out = []
    for offset, (k, v) in enumerate(pairs):
        if wrap_json:
            k = None if k is None else wrapped(k)
            v = None if v is None else wrapped(v)
        out.append(Message(topic, 0, offset, encode(k), encode(v), 0))
    return out


def _run(messages, options=None):
    return run_transformation(load_transformation(DEBEZIUM, options={**MIRROR, **(options or {})}), messages)


def _rows(statement):
    return statement.parameters[ROWS_PARAMETER]


@pytest.mark.parametrize("wrap_json", [False, True], ids=["plain JSON", "schema/payload wrapper"])
def test_a_postgres_tables_life_becomes_upserts_a_delete_and_nothing_for_the_tombstone(wrap_json):
    reads, sweep, upsert, marker, delete, aged = _run(_messages(pg_story(), wrap_json=wrap_json))
    # the snapshot (its first read to its last) is written, then its table's nodes it did not read go
    assert [r["k0"] for r in _rows(reads)] == [1, 2] and "coalesce(n.`_debezium_snapshot`, '') <> r.snapshot" \
        in sweep.query and _rows(sweep)[0]["snapshot"] == "pg:" + "1000".zfill(20) + ":0"
    assert upsert.query.startswith(f"UNWIND ${ROWS_PARAMETER} AS r ") and \
        "MERGE (n:`inventory.customers` {`id`: r.k0, `_debezium_mark`: $mark})" in upsert.query
    assert "SET n = r.properties" in upsert.query   # replaced, so a column that became absent goes
    rows = _rows(upsert)
    assert [r["k0"] for r in rows] == [3, 1]
    assert rows[1]["properties"]["first_name"] == "Anne Marie" and "email" not in rows[1]["properties"]
    assert rows[1]["properties"][POSITION_PROPERTY] == rows[1]["position"] == "pg:" + "3000".zfill(20) + ":1"
    assert rows[1]["properties"]["_debezium_mark"] == "debezium"
    assert "_DebeziumDeleted" in marker.query and "DETACH DELETE n" in delete.query
    assert [r["k0"] for r in _rows(delete)] == [2] and "k0: r.k0" in marker.query
    # delete markers older than delete_retention_ms (a week by default) before the newest delete go
    assert "MATCH (d:`_DebeziumDeleted`)" in aged.query and aged.parameters["before"] == \
        _rows(delete)[0]["time"] - 7 * 24 * 3600 * 1000


def test_a_replayed_batch_makes_the_same_statements():
    story = _messages(pg_story())
    assert _run(story) == _run(story)


@given(st.lists(st.integers(0, 2 ** 63 - 1), min_size=2, max_size=6))
def test_postgres_positions_sort_as_their_lsns(lsns):
    texts = [source_position({"lsn": lsn}, {}).text for lsn in lsns]
    assert sorted(texts) == [source_position({"lsn": lsn}, {}).text for lsn in sorted(lsns)]


@given(st.lists(st.tuples(st.integers(1, 99_999_999), st.integers(0, 2 ** 40), st.integers(0, 10_000)),
                min_size=2, max_size=6))
def test_mysql_positions_sort_as_file_index_pos_and_row_as_numbers(places):
    """The binlog index is a number: mysql-bin.1000000 (7 digits) follows mysql-bin.999999."""
    def text(place):
        return source_position({"file": f"mysql-bin.{place[0]:06d}", "pos": place[1], "row": place[2],
                                "server_id": 1}, {}).text
    assert sorted(text(p) for p in places) == [text(p) for p in sorted(places)]


@pytest.mark.parametrize("older, newer", [
    ({"commit_lsn": "00000027:00000758:0005", "change_lsn": "00000027:00000758:0002", "event_serial_no": 1,
      "ts_ms": 9}, {"commit_lsn": "00000027:00000760:0001", "change_lsn": "00000027:00000759:0001", "ts_ms": 1}),
    ({"scn": "9", "commit_scn": "99", "ts_ms": 9}, {"scn": "100", "commit_scn": "101", "ts_ms": 1}),
    ({"commit_lsn": "627404540760620", "change_lsn": "627404540485812", "ts_ms": 9},
     {"commit_lsn": "1627404540760620", "change_lsn": "1627404540485812", "ts_ms": 1}),
    ({"ord": 5, "ts_ms": 1558965508000}, {"ord": 1, "ts_ms": 1558965509000}),
    ({"connector": "cassandra", "keyspace": "k", "file": "commitlog-6-999.log", "pos": 9, "ts_ms": 9},
     {"connector": "cassandra", "keyspace": "k", "file": "commitlog-6-1000.log", "pos": 1, "ts_ms": 1}),
], ids=["sqlserver", "oracle", "informix", "mongodb", "cassandra"])
def test_each_connectors_own_position_orders_its_events_whatever_their_time(older, newer):
    assert source_position(newer, {}).at_least(source_position(older, {}))
    assert not source_position(older, {}).at_least(source_position(newer, {}))


def test_a_snapshot_read_sorts_before_the_stream_at_the_same_log_position():
    read = source_position({"commit_lsn": "00000027:00000758:0005", "ts_ms": 2_000}, {}, snapshot=True)
    change = source_position({"commit_lsn": "00000027:00000758:0005", "change_lsn": "00000027:00000758:0002",
                              "ts_ms": 1_000}, {})
    assert change.at_least(read) and not read.at_least(change)


def test_truncate_deletes_the_tables_nodes_by_default_or_is_ignored():
    truncate = [(None, envelope("t", pg_source(7000)))]   # a truncate has a null key
    assert _run(_messages(truncate), {"truncate": "ignore"}) == []
    marker, delete = _run(_messages(truncate), {"labels": {"inventory.customers": "Customer"}})
    assert "MERGE (t:`_DebeziumTruncated`" in marker.query
    assert delete.query.startswith("UNWIND $mgstreams_rows AS r MATCH (n:`Customer`) WHERE n.`_debezium_mark` = "
                                   "$mark AND") and "DETACH DELETE n" in delete.query
    assert "IS NULL OR" in delete.query and delete.parameters["mark"] == "debezium"


def test_labels_are_renamed_and_foreign_keys_become_relationships():
    options = {"labels": {"inventory.orders": "Order", "customers": "Customer"},
               "relationships": {"inventory.orders": {"purchaser": {"type": "PURCHASED_BY", "label": "Customer",
                                                                    "key": "id"}}}}
    events = [(key(10), envelope("c", pg_source(100, table="orders"), after={"id": 10, "purchaser": 1})),
              (key(11), envelope("c", pg_source(200, table="orders"), after={"id": 11, "purchaser": None}))]
    upsert, unlink, targets, link = _run(_messages(events, topic="dbserver1.inventory.orders"), options)
    assert "MERGE (n:`Order` {`id`: r.k0" in upsert.query
    assert "-[old:`PURCHASED_BY`]->(m)" in unlink.query and unlink.query.endswith("DELETE old")
    assert targets.parameters["targets"] == [1]   # each target MERGEd once, with the mark
    assert "MERGE (m:`Customer` {`id`: target, `_debezium_mark`: $mark})" in targets.query
    assert "MERGE (n)-[:`PURCHASED_BY`]->(m)" in link.query and "r.target IS NOT NULL" in link.query
    for statement in (unlink, link):   # only for the event the node now holds
        assert "n.`_debezium_position` = r.position" in statement.query
        assert [r["target"] for r in _rows(statement)] == [1, None]


def test_json_converter_decimals_become_exact_text():
    schema = {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": [
        {"field": "id", "type": "int32"},
        {"field": "price", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
         "parameters": {"scale": "2", "connect.decimal.precision": "10"}}]}]}
    value = wrapped(envelope("c", pg_source(100, table="products"), after={"id": 1, "price": "AOo="}), schema)
    [statement] = _run([Message("p", 0, 0, encode(wrapped(key(1))), encode(value), 0)])
    assert _rows(statement)[0]["properties"]["price"] == "2.34"   # 0x00ea = 234, scale 2


def test_a_schemaless_streams_decimals_and_dates_are_declared_in_types():
    value = envelope("c", pg_source(100, table="products"), after={"id": 1, "price": "AOo=", "born": 1})
    options = {"types": {"inventory.products": {"price": "decimal:2", "born": "date"}}}
    [statement] = _run([Message("p", 0, 0, encode(key(1)), encode(value), 0)], options)
    assert _rows(statement)[0]["properties"]["price"] == "2.34"
    assert str(_rows(statement)[0]["properties"]["born"]) == "1970-01-02"
    with pytest.raises(TransformError, match=r"transform.options\['types'\]\['t'\]\['c'\]: expected one of"):
        _run([], {"types": {"t": {"c": "money"}}})


def test_an_event_with_no_key_is_refused_naming_the_record_and_nothing_is_written():
    event = envelope("c", pg_source(100), after=customer(5, "Keyless"))
    with pytest.raises(TransformError, match=r"record dbserver1.inventory.customers:0@0: the Debezium event "
                                             r"\(op 'c' on postgres.inventory.customers\) has no key"):
        _run(_messages([(None, event)]))
    with pytest.raises(TransformError, match=r"record t:0@3: value.op is None, expected a Debezium change event"):
        _run([Message("t", 0, 3, b'{"id": 1}', b'{"id": 1, "name": "not an event"}', 0)])
    with pytest.raises(TransformError, match=r"transform.options: unknown key 'label'"):
        _run(_messages(pg_story()), {"label": {}})
    with pytest.raises(TransformError, match=r"transform.options\['tables'\]: expected the list of tables"):
        run_transformation(load_transformation(DEBEZIUM, options={"truncate": "delete"}), _messages(pg_story()))


def test_records_of_tables_not_named_and_records_that_are_not_row_events_are_skipped_and_counted():
    from stream_registry.builtin_transformations.cdc import SKIPPED
    before = dict(SKIPPED)
    other = (key(1), envelope("c", pg_source(100, table="secrets"), after={"id": 1}))
    heartbeat = ({"serverName": "dbserver1"}, {"ts_ms": 1})
    begin = (None, {"status": "BEGIN", "id": "571:53195829", "ts_ms": 1, "event_count": None,
                    "data_collections": None})
    assert _run(_messages([other, heartbeat, begin])) == []
    assert SKIPPED["not_mirrored"] == before.get("not_mirrored", 0) + 1
    assert SKIPPED["heartbeat"] == before.get("heartbeat", 0) + 1
    assert SKIPPED["transaction"] == before.get("transaction", 0) + 1


def test_messages_expose_the_records_headers():
    message = Message("t", 0, 0, None, b"{}", 0, [("__debezium.oldkey", b'{"id": 1}')])
    assert message.headers() == [("__debezium.oldkey", b'{"id": 1}')]

    class Raw:   # a consumed confluent_kafka.Message
        def headers(self): return [("__op", b"d")]   # noqa: E704
    assert wrap(Raw()).headers() == [("__op", b"d")]
    assert Message("t", 0, 0, None, b"{}", 0).headers() == []


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


def test_protobuf_nullable_wrappers_decode_to_a_value_or_null():
    """Debezium's Protobuf converter writes a nullable column as google.protobuf.*Value: the column's value, or null
    when unset (not "" nor {"value": ...})."""
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from google.protobuf import descriptor_pb2, descriptor_pool, wrappers_pb2
    from google.protobuf.message_factory import GetMessageClass
    pool = descriptor_pool.DescriptorPool()
    wrappers = descriptor_pb2.FileDescriptorProto()
    wrappers_pb2.DESCRIPTOR.CopyToProto(wrappers)
    pool.Add(wrappers)
    fd = descriptor_pb2.FileDescriptorProto(name="inventory/customer.proto", package="inventory", syntax="proto3",
                                            dependency=["google/protobuf/wrappers.proto"])
    row = fd.message_type.add(name="Customer")
    row.field.add(name="id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT32, label=1)
    for number, name in ((2, "email"), (3, "nickname")):
        row.field.add(name=name, number=number, type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE, label=1,
                      type_name=".google.protobuf.StringValue")
    pool.Add(fd)
    customer = GetMessageClass(pool.FindMessageTypeByName("inventory.Customer"))
    with SchemaRegistry() as server:
        client = SchemaRegistryClient({"url": server.url})
        data = ProtobufSerializer(customer, client, {"use.deprecated.format": False})(
            customer(id=1, email={"value": ""}),
            SerializationContext("customers", MessageField.VALUE))
        decoded = Decoder("bytes", "protobuf", server.url).decode("customers", data)
    assert decoded == {"id": 1, "email": "", "nickname": None}
