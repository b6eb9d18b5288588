"""Record formats (stream_registry/formats.py): what a stream declares, and decoding with confluent-kafka's own
deserializers against a Schema Registry stand-in (support/schema_registry.py, a real HTTP server), the records
made by confluent-kafka's real Avro, Protobuf and JSON Schema serializers."""
from __future__ import annotations

import base64
import decimal
import functools
import json

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message_factory import GetMessageClass
from hypothesis import given, settings
from hypothesis import strategies as st
from schema_registry import SchemaRegistry

from stream_registry import StreamConfig
from stream_registry.errors import ConfigError, DecodeError, RegistryUnavailable, TransformError
from stream_registry.formats import Decoder
from stream_registry.graph.sink_faults import Fault, classify
from stream_registry.graph.transform import Message, decode_all, load_transformation, run_transformation, wrap

AVRO_ORDER = json.dumps({"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "item", "type": "string"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}}]})
SECRET = "s3cr3t-registry-password"


@pytest.fixture(scope="module")
def registry():
    with SchemaRegistry() as server:
        yield server


def _ctx(topic: str, key: bool = False) -> SerializationContext:
    return SerializationContext(topic, MessageField.KEY if key else MessageField.VALUE)


def _order_proto():
    fd = descriptor_pb2.FileDescriptorProto(name="shop/order.proto", package="shop", syntax="proto3")
    message = fd.message_type.add(name="Order")
    message.field.add(name="id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64, label=1)
    message.field.add(name="item", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=1)
    message.field.add(name="tags", number=3, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=3)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


class _Raw:
    """What confluent_kafka.Message offers the wrappers."""

    def __init__(self, topic, key, value, offset=0):
        self._t, self._k, self._v, self._o = topic, key, value, offset

    def topic(self):
        return self._t

    def partition(self):
        return 0

    def offset(self):
        return self._o

    def key(self):
        return self._k

    def value(self):
        return self._v

    def timestamp(self):
        return (1, 1_700_000_000_000)


def test_avro_protobuf_and_json_schema_records_decode_to_the_values_the_producer_wrote(registry):
    client = SchemaRegistryClient({"url": registry.url})
    avro = AvroSerializer(client, AVRO_ORDER)(
        {"id": 2 ** 53 + 1, "item": "lamp", "amount": decimal.Decimal("12.34")}, _ctx("orders_avro"))
    order = _order_proto()
    proto = ProtobufSerializer(order, client, {"use.deprecated.format": False})(
        order(id=2 ** 62, item="desk", tags=["a", "b"]), _ctx("orders_proto"))
    schema = json.dumps({"type": "object", "properties": {"id": {"type": "integer"}, "item": {"type": "string"}}})
    jsons = JSONSerializer(schema, client)({"id": 7, "item": "chair"}, _ctx("orders_json"))
    key = AvroSerializer(client, '{"type": "record", "name": "K", "fields": [{"name": "id", "type": "long"}]}')(
        {"id": 9}, _ctx("orders_avro", key=True))

    assert Decoder("avro", "avro", registry.url).decode("orders_avro", avro) == \
        {"id": 2 ** 53 + 1, "item": "lamp", "amount": "12.34"}   # exact: a decimal as text, a long as int
    assert Decoder("bytes", "protobuf", registry.url).decode("orders_proto", proto) == \
        {"id": 2 ** 62, "item": "desk", "tags": ["a", "b"]}
    assert Decoder("bytes", "json_schema", registry.url).decode("orders_json", jsons) == {"id": 7, "item": "chair"}

    # a transformation sees the decoded value and key; payload() and key() stay the raw bytes
    message = wrap(_Raw("orders_avro", key, avro), Decoder("avro", "avro", registry.url))
    assert message.value()["item"] == "lamp" and message.key_value() == {"id": 9}
    assert message.payload() == avro and message.key() == key
    plain = Message("t", 0, 0, b"k", b"v", 0)   # format bytes: value() is payload()
    assert (plain.value(), plain.key_value()) == (b"v", b"k")
    seen = run_transformation(lambda ms: [{"query": "CREATE (:O {item: $item})",
                                           "parameters": {"item": m.value()["item"]}} for m in ms], [message])
    assert seen[0].parameters == {"item": "lamp"}


def test_json_format_decodes_without_a_registry_and_a_bad_record_is_named():
    decoder = Decoder("json", "json")
    assert decoder.decode("t", b'{"a": 1}') == {"a": 1} and decoder.decode("t", None) is None
    message = wrap(_Raw("clicks", b'"k"', b"{not json", offset=41), decoder)
    with pytest.raises(DecodeError, match=r"record clicks:0@41: value is not JSON"):
        decode_all([message])


def test_a_wrong_magic_byte_an_unknown_schema_id_and_a_cut_record_are_the_messages_fault(registry):
    client = SchemaRegistryClient({"url": registry.url})
    good = AvroSerializer(client, AVRO_ORDER)({"id": 1, "item": "x", "amount": decimal.Decimal("1.00")},
                                              _ctx("orders_bad"))
    decoder = Decoder("bytes", "avro", registry.url)
    cases = {b"\x07" + good[1:]: r"first byte is 07, expected magic byte 00",
             b"\x00\x00\x00\x30\x39" + good[5:]: r"schema id 12345 is not known to the Schema Registry",
             good[:7]: r"does not decode as avro with schema id"}
    for offset, (data, error) in enumerate(cases.items()):
        message = wrap(_Raw("orders_bad", None, data, offset), decoder)
        with pytest.raises(DecodeError, match=rf"record orders_bad:0@{offset}: value.*{error}") as failed:
            decode_all([message])
        assert classify(failed.value) is Fault.MESSAGE and isinstance(failed.value, TransformError)
    assert decoder.decode("orders_bad", good)["item"] == "x"   # the decoder still works: nothing else changed


def test_an_unreachable_registry_is_transient_and_names_the_registry_not_its_secret():
    server = SchemaRegistry(auth="Basic " + base64.b64encode(f"mg:{SECRET}".encode()).decode())
    try:
        client = SchemaRegistryClient({"url": server.url, "basic.auth.user.info": f"mg:{SECRET}"})
        data = AvroSerializer(client, AVRO_ORDER)({"id": 1, "item": "x", "amount": decimal.Decimal("1.00")},
                                                  _ctx("orders_auth"))
        right = Decoder("bytes", "avro", server.url, {"schema.registry.basic.auth.user.info": f"mg:{SECRET}"})
        assert right.decode("orders_auth", data)["id"] == 1   # the stream's credentials reach the registry
        wrong = Decoder("bytes", "avro", server.url, {"schema.registry.basic.auth.user.info": "mg:wrong-password"})
        with pytest.raises(RegistryUnavailable, match="answered HTTP 401") as refused:
            wrong.decode("orders_auth", data)
        assert classify(refused.value) is Fault.TRANSIENT and "wrong-password" not in str(refused.value)
        fresh = Decoder("bytes", "avro", server.url, {"schema.registry.basic.auth.user.info": f"mg:{SECRET}"})
    finally:
        server.down()
    with pytest.raises(RegistryUnavailable, match=rf"Schema Registry at {server.url} cannot be reached") as down:
        fresh.decode("orders_auth", data)
    assert classify(down.value) is Fault.TRANSIENT and SECRET not in str(down.value)


def _config(**fields) -> StreamConfig:
    return StreamConfig(**{"name": "cdc", "topics": ["t"], "bootstrap_servers": "localhost:9092",
                           "transform": "stream_registry.builtin_transformations.debezium", "sink": "null://",
                           **fields})


def test_formats_and_the_registry_url_are_checked_when_a_stream_is_declared(monkeypatch):
    monkeypatch.delenv("MGSTREAMS_ALLOWED_HOSTS", raising=False)
    with pytest.raises(ConfigError, match=r"^schema.registry.url: host 'registry.example.com' is not one the "
                                          r"operator allows"):
        _config(value_format="avro", schema_registry_url="http://registry.example.com:8081")
    with pytest.raises(ConfigError, match=r"^value.format: expected one of 'bytes', 'json', 'avro', 'protobuf', "
                                          r"'json_schema', got 'avro2'"):
        _config(value_format="avro2")
    with pytest.raises(ConfigError, match=r"^schema.registry.url: key.format 'protobuf' needs a Schema Registry"):
        _config(key_format="protobuf")
    with pytest.raises(ConfigError, match=r"^schema.registry.url: user information in the URL is refused") as refused:
        _config(value_format="avro", schema_registry_url=f"http://mg:{SECRET}@localhost:8081")
    assert SECRET not in str(refused.value)
    with pytest.raises(ConfigError, match=r"unknown Schema Registry credential"):
        _config(value_format="avro", schema_registry_url="http://localhost:8081",
                credentials={"schema.registry.ssl.key.location": "/etc/passwd"})
    monkeypatch.setenv("MGSTREAMS_ALLOWED_HOSTS", "registry.example.com")
    config = _config(value_format="avro", schema_registry_url="http://registry.example.com:8081",
                     credentials={"schema.registry.basic.auth.user.info": f"mg:{SECRET}"},
                     transform_options='{"truncate": "delete"}')
    assert config.transform_options == {"truncate": "delete"}
    assert SECRET not in repr(config) and config.kafka_credentials() == {}   # never given to librdkafka
    assert "schema.registry.basic.auth.user.info" not in config.client_config()


def test_alter_takes_the_formats_by_their_option_names():
    config = _config()
    altered = config.altered({"value.format": "json", "key.format": "json"})
    assert (altered.value_format, altered.key_format) == ("json", "json")
    with pytest.raises(ConfigError, match=r"^schema.registry.url: value.format 'avro' needs a Schema Registry"):
        config.altered({"value.format": "avro"})
    assert config.value_format == "bytes"


def test_the_built_in_transformations_use_the_decoded_value_when_a_format_is_set(registry):
    client = SchemaRegistryClient({"url": registry.url})
    data = AvroSerializer(client, AVRO_ORDER)({"id": 3, "item": "vase", "amount": decimal.Decimal("9.90")},
                                              _ctx("orders_builtin"))
    decoded = wrap(_Raw("orders_builtin", b"k", data, 5), Decoder("bytes", "avro", registry.url))
    [node] = run_transformation(load_transformation("stream_registry.builtin_transformations.json_nodes"), [decoded])
    assert node.parameters["properties"] == {"id": 3, "item": "vase", "amount": "9.90"}
    [message] = run_transformation(load_transformation("stream_registry.builtin_transformations.merge_messages"),
                                   [decoded])
    assert json.loads(message.parameters["payload"]) == {"id": 3, "item": "vase", "amount": "9.90"}
    assert message.parameters["key"] == "k"   # key.format bytes: the raw key as text


@functools.cache
def _rich_serdes(url: str):
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    client = SchemaRegistryClient({"url": url})
    return AvroSerializer(client, RICH), AvroDeserializer(client)


RICH = json.dumps({"type": "record", "name": "Rich", "fields": [
    {"name": "id", "type": "long"},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}},
    {"name": "blob", "type": "bytes"},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": "double"}},
    {"name": "inner", "type": ["null", {"type": "record", "name": "Inner", "fields": [
        {"name": "flag", "type": "boolean"}, {"name": "kind", "type": {"type": "enum", "name": "Kind",
                                                                      "symbols": ["A", "B"]}}]}]}]})


@settings(max_examples=15, deadline=None)
@given(st.lists(st.fixed_dictionaries({
    "id": st.integers(-2 ** 63, 2 ** 63 - 1),
    "price": st.decimals(min_value=-10 ** 8, max_value=10 ** 8, places=3, allow_nan=False, allow_infinity=False),
    "blob": st.binary(max_size=20), "note": st.none() | st.text(max_size=10),
    "tags": st.lists(st.text(max_size=5), max_size=3),
    "attrs": st.dictionaries(st.text(max_size=5), st.floats(allow_nan=False), max_size=3),
    "inner": st.none() | st.fixed_dictionaries({"flag": st.booleans(), "kind": st.sampled_from(["A", "B"])})}),
    min_size=2, max_size=5))
def test_avro_records_after_a_schemas_first_decode_as_confluent_kafkas_deserializer_decodes_them(registry, records):
    """The Decoder reads a plain schema's later records with the one call AvroDeserializer makes for them
    (formats._plain_avro_schema): the values must be what the deserializer itself gives."""
    from stream_registry.formats import plain
    serialize, reference = _rich_serdes(registry.url)
    decoder = Decoder("bytes", "avro", registry.url)
    for record in records:
        data = serialize(record, _ctx("rich"))
        assert decoder.decode("rich", data) == plain(reference(data, _ctx("rich")))
    assert decoder._avro_plain   # the later records took the plain path


def test_a_streams_records_fetch_their_schema_once_not_per_record():
    with SchemaRegistry() as server:
        client = SchemaRegistryClient({"url": server.url})
        serialize = AvroSerializer(client, AVRO_ORDER)
        records = [serialize({"id": i, "item": "x", "amount": decimal.Decimal("1.00")}, _ctx("once"))
                   for i in range(200)]
        decoder = Decoder("bytes", "avro", server.url)
        assert [decoder.decode("once", r)["id"] for r in records] == list(range(200))
        assert server.requests[("GET", "/schemas/ids")] <= 2, server.requests


_FORMAT_FIELDS = ("key.format:", "value.format:", "schema.registry.url:", "credentials[", "transform.options:")


@settings(max_examples=150, deadline=None)
@given(key_format=st.one_of(st.sampled_from(["bytes", "json", "avro", "protobuf", "json_schema"]), st.text(max_size=8),
                            st.integers(), st.none()),
       value_format=st.one_of(st.sampled_from(["bytes", "json", "avro", "protobuf", "json_schema"]),
                              st.text(max_size=8), st.none()),
       url=st.one_of(st.none(), st.sampled_from(["http://localhost:8081", "https://127.0.0.1:1", "ftp://localhost",
                                                 "http://far.example.com", f"http://u:{SECRET}@localhost:1", "",
                                                 "http://[::1", "localhost:8081"]), st.text(max_size=12)),
       credentials=st.dictionaries(st.sampled_from(["schema.registry.basic.auth.user.info",
                                                    "schema.registry.bearer.auth.token", "schema.registry.other",
                                                    "sasl.password"]), st.just(SECRET), max_size=2),
       options=st.one_of(st.none(), st.just('{"truncate": "delete"}'), st.just("{not json"), st.just("[1]"),
                         st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)))
def test_bad_formats_registry_urls_and_credentials_are_refused_naming_the_field_and_no_secret(
        key_format, value_format, url, credentials, options):
    try:
        config = _config(key_format=key_format, value_format=value_format, schema_registry_url=url,
                         credentials=credentials, transform_options=options)
    except ConfigError as exc:
        assert str(exc).startswith(_FORMAT_FIELDS), str(exc)
        assert SECRET not in str(exc)
        return
    config.validate()
    assert SECRET not in repr(config) and config.key_format in ("bytes", "json", "avro", "protobuf", "json_schema")
    if "avro" in (config.key_format, config.value_format):
        assert config.schema_registry_url is not None
