"""Change data capture end to end through a real host (`mgstreams serve`, its stream processes importing the
pymgclient stand-in as `mgclient`): Debezium events for a PostgreSQL table, keys and values in Avro made by
confluent-kafka's real AvroSerializer against the Schema Registry stand-in (support/schema_registry.py), decoded in
the stream's process and written as the debezium transformation's UNWIND statements. A record that does not decode
goes to the dead-letter topic with Connect's headers and the stream runs on; `check` previews decoded values; a
registry outside the allowlist is refused at create; an unreachable registry is the stream's error.

The scenario documented in docs/how-to/change-data-capture.md: that page's commands are checked here.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from broker_support import PRODUCER_CONFIG
from cli_helpers import mgstreams
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from debezium_events import AVRO_ENVELOPE, AVRO_KEY, customer, envelope, key, pg_source, pg_story
from host_helpers import HostProcess, http
from mgclient_standin import mgclient as standin
from paths import ROOT, SUPPORT
from schema_registry import SchemaRegistry
from stream_helpers import FAST_REJOIN, wait_until

from mgstreams.query_module import STREAMS_MODULE, QueryModule
from stream_registry.errors import StreamError

DEBEZIUM = "stream_registry.builtin_transformations.debezium"
POISON_OFFSET = 4
TRUNCATE_POSITION = "pg:" + "9000".zfill(20) + ":1"


@pytest.fixture(scope="module")
def cdc_host(tmp_path_factory, quick_rebalance):
    tmp = tmp_path_factory.mktemp("cdc_host")
    journal = tmp / "journal.jsonl"
    host = HostProcess(tmp / "state", env={
        "PYTHONPATH": os.pathsep.join((standin.PYTHONPATH_ENTRY, str(SUPPORT), str(ROOT))),
        "MGCLIENT_STANDIN_JOURNAL": str(journal), "MGCLIENT_STANDIN_RECORD": "rows", "MGCLIENT_STANDIN_RTT_MS": "0",
        "MGSTREAMS_ALLOWED_HOSTS": "memgraph,localhost,127.0.0.0/8"}).start()
    with SchemaRegistry() as registry:
        yield host, journal, registry
    host.stop()


def _rows_written(journal, label: str) -> list[dict]:
    """Every row of the debezium statements for `label` that were committed, in order (the stand-in journals an
    UNWIND that uses its row variable whole, as the upserts do, as one statement with its rows; others row by
    row)."""
    out = []
    for entry in standin.journal_entries(journal):
        for query, params in entry["statements"]:
            if f"(n:`{label}`" in query:
                rows = params.get("mgstreams_rows", [params])
                out.extend({"delete": "DETACH DELETE" in query, **row} for row in rows)
    return out


def _produce_avro(kafka, topic: str, registry_url: str, events, poison_at: int | None = None) -> None:
    client = SchemaRegistryClient({"url": registry_url})
    keys = AvroSerializer(client, json.dumps(AVRO_KEY))
    values = AvroSerializer(client, json.dumps(AVRO_ENVELOPE))
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, **PRODUCER_CONFIG})
    for i, (k, v) in enumerate(events):
        if i == poison_at:   # a record written without the registry: JSON where Avro is expected
            producer.produce(topic, key=keys(key(99), SerializationContext(topic, MessageField.KEY)),
                             value=b'{"op": "c"}', partition=0)
        producer.produce(topic, partition=0, key=keys(k, SerializationContext(topic, MessageField.KEY)),
                         value=None if v is None else values(v, SerializationContext(topic, MessageField.VALUE)))
    producer.flush(30)


def test_avro_debezium_events_become_graph_writes_and_a_record_that_does_not_decode_is_dead_lettered(
        kafka, cdc_host):
    host, journal, registry = cdc_host
    topic, dlq = kafka.new_topic(partitions=1, prefix="dbserver1"), f"dlq_{uuid.uuid4().hex[:10]}"
    late = (key(1), envelope("u", pg_source(2500), after=customer(1, "Stale")))   # redelivered after a newer one
    truncate = (None, envelope("t", pg_source(9000)))   # a truncate has a null key
    events = [*pg_story(), late, truncate]
    _produce_avro(kafka, topic, registry.url, events, poison_at=POISON_OFFSET)
    with http(host) as api:
        created = api.post("/streams", json={
            "name": "cdc_avro", "topics": [topic], "bootstrap_servers": kafka.bootstrap_servers,
            "transform": DEBEZIUM, "sink": "bolt://memgraph:7687", "consumer_group": f"g_{uuid.uuid4().hex[:8]}",
            "configs": FAST_REJOIN, "key.format": "avro", "value.format": "avro",
            "schema.registry.url": registry.url, "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": dlq,
            "transform.options": {"tables": ["inventory.customers"], "labels": {"inventory.customers": "Customer"},
                                  "truncate": "delete"}})
        assert created.status_code == 201, created.text
        info = created.json()
        assert (info["key_format"], info["value_format"], info["schema_registry_url"]) == \
            ("avro", "avro", registry.url)

        preview = api.post("/streams/cdc_avro/check", json={"offset": "earliest", "limit": 2})
        assert preview.status_code == 200, preview.text
        first = preview.json()[0]["parameters"]["mgstreams_rows"][0]
        assert first["properties"]["first_name"] == "Anne" and first["k0"] == 1   # decoded, not bytes

        api.put("/streams/cdc_avro/start").raise_for_status()
        wait_until(lambda: api.get("/streams/cdc_avro").json()["dead_lettered"] == 1, 60,
                   what="the record that does not decode dead-lettered")
        wait_until(lambda: any(r.get("position") == TRUNCATE_POSITION for r in _rows_written(journal, "Customer")),
                   60, what="the change events written, up to the truncate")
        stream = api.get("/streams/cdc_avro").json()
        assert stream["status"] == "running" and stream["error"] is None
        history = [h for h in api.get("/streams/cdc_avro/history").json() if h["status"] == "dead_lettered"]
        assert [h["offset"] for h in history] == [POISON_OFFSET]
        assert f"record {topic}:0@{POISON_OFFSET}" in history[0]["message"] and "magic byte" in history[0]["message"]
        api.put("/streams/cdc_avro/stop").raise_for_status()

    rows = _rows_written(journal, "Customer")
    upserts = [r for r in rows if "properties" in r]
    written = [(r["k0"], r["properties"]["first_name"]) for r in upserts]
    assert [w for w in written if w[1] != "Stale"] == [(1, "Anne"), (2, "Bob"), (3, "Cleo"), (1, "Anne Marie")]
    anne_marie = next(r for r in upserts if r["properties"]["first_name"] == "Anne Marie")
    assert "email" not in anne_marie["properties"]          # the column that became absent is not set
    for stale in (r for r in upserts if r["properties"]["first_name"] == "Stale"):   # the late event, if its own
        assert stale["position"] < anne_marie["position"]                            # batch: its older position
    assert [r["k0"] for r in rows if r["delete"] and "k0" in r] == [2]   # the tombstone wrote nothing
    assert rows[-1]["delete"] and rows[-1]["position"] == TRUNCATE_POSITION   # the truncate: the table's nodes

    # a backfill of the stream (local engine) decodes with the stream's formats and runs its options
    out = journal.parent / "backfill"
    done = mgstreams("backfill", "--stream", "cdc_avro", "--engine", "local", "--from", POISON_OFFSET + 1,
                     "--until", "latest", "--sink", f"cypherl://{out}", host=host, timeout=120)
    assert done.returncode == 0, done.stderr
    replayed = "".join(f.read_text() for f in out.glob("*.cypherl"))
    assert '"Stale"' in replayed and "MATCH (n:`Customer`) WHERE" in replayed and "DETACH DELETE" in replayed

    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": f"r_{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([dlq])
        dead = None
        for _ in range(60):
            dead = consumer.poll(1)
            if dead is not None and dead.error() is None:
                break
        assert dead is not None and dead.value() == b'{"op": "c"}'
        headers = dict(dead.headers())
        assert headers["__connect.errors.exception.class.name"] == b"stream_registry.errors.DecodeError"
        assert headers["__connect.errors.offset"] == str(POISON_OFFSET).encode()
    finally:
        consumer.close()


def test_a_registry_outside_the_allowlist_is_refused_and_an_unreachable_one_is_the_streams_error(kafka, cdc_host):
    host, _, registry = cdc_host
    topic = kafka.new_topic(partitions=1)
    body = {"name": "cdc_far", "topics": [topic], "bootstrap_servers": kafka.bootstrap_servers,
            "transform": DEBEZIUM, "sink": "bolt://memgraph:7687", "value.format": "avro",
            "schema.registry.url": "http://registry.example.com:8081", "configs": FAST_REJOIN, "restart": "never"}
    with http(host) as api:
        refused = api.post("/streams", json=body)
        assert refused.status_code == 400
        assert refused.json()["error"].startswith("schema.registry.url: host 'registry.example.com' is not one")
        assert api.get("/streams/cdc_far").status_code == 404   # nothing was created

        # the CLI takes the formats as --config options; the registry is down when records come
        closed = SchemaRegistry()
        closed.down()
        env = {**os.environ, "MGSTREAMS_URL": host.url}
        made = subprocess.run([sys.executable, "-m", "mgstreams", "create", "cdc_down", "--topic", topic,
                               "--bootstrap", kafka.bootstrap_servers, "--transform", DEBEZIUM,
                               "--sink", "bolt://memgraph:7687", "--config", "value.format=avro",
                               "--config", "key.format=avro",
                               "--config", 'transform.options={"tables": ["inventory.customers"]}',
                               "--config", f"schema.registry.url={closed.url}", "--config", "restart=never",
                               "--config", "session.timeout.ms=6000"], env=env, capture_output=True, text=True,
                              timeout=60)
        assert made.returncode == 0, made.stderr
        _produce_avro(kafka, topic, registry.url, pg_story()[:1])
        api.put("/streams/cdc_down/start").raise_for_status()
        wait_until(lambda: api.get("/streams/cdc_down").json()["status"] == "error", 90,
                   what="the stream in error after its retries")
        error = api.get("/streams/cdc_down").json()["error"]
        assert f"the Schema Registry at {closed.url} cannot be reached" in error, error

        # alter points it at the live registry (by option name, as the CLI sends it); the batch is written
        altered = subprocess.run([sys.executable, "-m", "mgstreams", "alter", "cdc_down", "--config",
                                  f"schema.registry.url={registry.url}"], env=env, capture_output=True, text=True,
                                 timeout=60)
        assert altered.returncode == 0, altered.stderr
        assert api.get("/streams/cdc_down").json()["schema_registry_url"] == registry.url
        api.put("/streams/cdc_down/start").raise_for_status()
        wait_until(lambda: api.get("/streams/cdc_down/offsets").json()[0]["committed_offset"] == 1, 60,
                   what=f"the record written once the registry answers ({api.get('/streams/cdc_down').json()}, "
                        f"{api.get('/streams/cdc_down/offsets').json()})")
        api.delete("/streams/cdc_down").raise_for_status()


def test_streams_create_and_alter_from_cypher_take_the_formats_as_options(kafka, cdc_host):
    host, _, registry = cdc_host
    topic = kafka.new_topic(partitions=1)
    with QueryModule(STREAMS_MODULE, host.url, token=host.token) as streams:
        streams.call("create", "cdc_cypher", [topic], kafka.bootstrap_servers, DEBEZIUM, "bolt://memgraph:7687", "",
                     1000, 100, {}, {}, "on-failure",
                     {"key.format": "json", "value.format": "json",
                      "transform.options": {"tables": ["inventory.customers"], "truncate": "delete"}})
        with pytest.raises(StreamError, match=r"schema.registry.url: value.format 'avro' needs a Schema Registry"):
            streams.call("alter", "cdc_cypher", {"value.format": "avro"})
        streams.call("alter", "cdc_cypher", {"value.format": "avro", "schema.registry.url": registry.url})
        with http(host) as api:
            info = api.get("/streams/cdc_cypher").json()
            assert (info["key_format"], info["value_format"], info["schema_registry_url"]) == \
                ("json", "avro", registry.url)
            assert info["transform_options"] == {"tables": ["inventory.customers"], "truncate": "delete"}
        streams.call("drop", "cdc_cypher")


def test_a_debezium_stream_without_the_tables_it_mirrors_is_refused_at_create_naming_the_option(kafka, cdc_host):
    """`tables` is required (a producer must not choose what the statements touch): a create without it, or with an
    unknown option, is a 400 naming the option, and nothing is created; the alter to a bad value changes nothing."""
    host, _, _ = cdc_host
    topic = kafka.new_topic(partitions=1)
    body = {"name": "cdc_untabled", "topics": [topic], "bootstrap_servers": kafka.bootstrap_servers,
            "transform": DEBEZIUM, "sink": "bolt://memgraph:7687", "configs": FAST_REJOIN, "restart": "never"}
    with http(host) as api:
        refused = api.post("/streams", json=body)
        assert refused.status_code == 400, refused.text
        assert "transform.options['tables']" in refused.json()["error"]
        assert api.get("/streams/cdc_untabled").status_code == 404
        unknown = api.post("/streams", json={**body, "transform.options": {"tables": ["a.b"], "tabels": 1}})
        assert unknown.status_code == 400 and "'tabels'" in unknown.json()["error"], unknown.text

        api.post("/streams", json={**body, "transform.options": {"tables": ["inventory.customers"]}}
                 ).raise_for_status()
        bad = api.patch("/streams/cdc_untabled", json={"transform.options": {"tables": [], "truncate": "x"}})
        assert bad.status_code == 400, bad.text
        shown = api.get("/streams/cdc_untabled").json()
        assert shown["transform_options"] == {"tables": ["inventory.customers"]}, shown
        api.delete("/streams/cdc_untabled").raise_for_status()
