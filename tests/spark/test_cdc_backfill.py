"""The Spark backfill decodes a registered stream's records as its live process does (stream_registry.formats, one
Decoder) and runs the same debezium transformation: Avro Debezium events made by confluent-kafka's real
AvroSerializer against the Schema Registry stand-in, replayed on the session's SparkSession into .cypherl files."""
from __future__ import annotations

import json

import pytest
from broker_support import PRODUCER_CONFIG
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from debezium_events import AVRO_ENVELOPE, AVRO_KEY, encode, pg_story
from schema_registry import SchemaRegistry

from spark_bridge.backfill import BackfillJob, run_backfill
from spark_bridge.job import decoding_of
from stream_registry import StreamConfig
from stream_registry.graph.sinks.schemes import open_sink
from stream_registry.graph.transform import Message, load_transformation, run_transformation
from stream_registry.offset_spec import parse_offset_spec

pytestmark = pytest.mark.spark
DEBEZIUM = "stream_registry.builtin_transformations.debezium"
OPTIONS = {"tables": ["inventory.customers"], "labels": {"inventory.customers": "Customer"}}


def test_a_backfill_of_avro_debezium_events_writes_what_the_live_transformation_makes_of_json(spark, kafka, tmp_path):
    topic = kafka.new_topic(1, prefix="dbserver1")
    story = pg_story()
    with SchemaRegistry() as registry:
        client = SchemaRegistryClient({"url": registry.url})
        keys, values = AvroSerializer(client, json.dumps(AVRO_KEY)), AvroSerializer(client, json.dumps(AVRO_ENVELOPE))
        producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, **PRODUCER_CONFIG})
        for k, v in story:
            producer.produce(topic, partition=0, key=keys(k, SerializationContext(topic, MessageField.KEY)),
                             value=None if v is None else values(v, SerializationContext(topic, MessageField.VALUE)))
        producer.flush(30)
        stream = StreamConfig(name="cdc", topics=[topic], bootstrap_servers=kafka.bootstrap_servers,
                              transform=DEBEZIUM, sink="null://", key_format="avro", value_format="avro",
                              schema_registry_url=registry.url, transform_options=OPTIONS)
        out = tmp_path / "out"
        report = run_backfill(spark, BackfillJob(
            kafka.bootstrap_servers, (topic,), parse_offset_spec("earliest"), parse_offset_spec("latest"), DEBEZIUM,
            f"cypherl://{out}", decoding=decoding_of(stream), transform_options=stream.transform_options))
    assert report.records == len(story)
    written = "".join(f.read_text() for f in sorted(out.glob("*.cypherl")))
    # the same events as JSON, through the same transformation in this process: the same statements
    as_json = [Message(topic, 0, i, encode(k), encode(v), 0) for i, (k, v) in enumerate(story)]
    expected = run_transformation(load_transformation(DEBEZIUM, options=OPTIONS), as_json)
    sink = open_sink(f"cypherl://{tmp_path / 'expected.cypherl'}", {})
    sink.write(expected)
    sink.close()
    assert _statements((tmp_path / "expected.cypherl").read_text()) == _statements(written)
    assert "Anne Marie" in written and "DETACH DELETE" in written and "MERGE (n:`Customer`" in written


def _statements(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and not line.startswith("//")]
