"""Ready transformations, usable by dotted path (`stream_registry.builtin_transformations.merge_messages`).

They are defined here, in the module users name (the loader accepts only a function defined in the module
named); `offset_commits` decodes the records of `__consumer_offsets` for `consumer_offsets`.

Each takes a `Messages` batch (ours or Memgraph's) and returns its statements: a `Statements` (a sequence
of Statement values, each with `.query` and `.parameters`), built as one query's rows per batch, not an
object per message; on a batch of consumed messages that are not decoded (`Messages.kafka_messages()`) the
rows are read from the consumed messages directly.

Idempotent ones are keyed by (topic, partition, offset), so replaying a
message (at-least-once redelivery after a crash, a Spark task retry, a backfill
over a range already ingested) leaves the graph as one delivery would:

- `merge_messages`   idempotent: one :KafkaMessage node per message.
- `merge_messages_batched` idempotent: the same, one UNWIND statement per batch
  (far fewer round trips; use it for backfills and bulk loads).
- `json_nodes`       idempotent: one :KafkaRecord node per message holding the
  payload's JSON object fields as properties.
- `create_messages`  NOT idempotent: every delivery CREATEs another node.
- `consumer_offsets` idempotent: for a stream on Kafka's `__consumer_offsets`
  (named exactly: librdkafka hides internal topics only from pattern
  subscriptions, and rejects the Java client's `exclude.internal.topics`
  setting, so no `configs` are needed), every group's commits as
  `(:ConsumerGroup)-[:COMMITTED]->(:Partition)-[:OF]->(:Topic)` and the current
  `(:ConsumerGroup)-[:AT]->(:Partition)` (see offset_commits).
- `debezium`         idempotent and order-safe: Debezium change events (JSON, with or
  without the schema/payload wrapper, or Avro/Protobuf/JSON Schema through the
  stream's value.format) as one node per row, keyed by its primary key (see cdc).

Payloads and keys are stored as UTF-8 text; undecodable bytes become U+FFFD. When the stream has a
key.format or value.format, they use the decoded value (`message.value()`, `message.key_value()`):
`json_nodes` sets the decoded record's fields, `merge_messages` stores its JSON text.
They need `message.partition()`, which mgstreams messages have and Memgraph's
built-in streams' messages do not.
Create an index first: `CREATE INDEX ON :KafkaMessage(topic, partition, offset);`
"""
from __future__ import annotations

import json
from typing import Any

from ..graph.statement import Statements
from . import cdc, offset_commits

_SET_MESSAGE = "SET m.payload = $payload, m.key = $key, m.timestamp = $timestamp"
MERGE_MESSAGE = f"MERGE (m:KafkaMessage {{topic: $topic, partition: $partition, offset: $offset}}) {_SET_MESSAGE}"
CREATE_MESSAGE = ("CREATE (m:KafkaMessage {topic: $topic, partition: $partition, offset: $offset, "
                  "payload: $payload, key: $key, timestamp: $timestamp})")
MERGE_MESSAGES_UNWIND = ("UNWIND $rows AS r MERGE (m:KafkaMessage {topic: r.topic, partition: r.partition, "
                         "offset: r.offset}) SET m.payload = r.payload, m.key = r.key, m.timestamp = r.timestamp")
MERGE_JSON_RECORD = ("MERGE (n:KafkaRecord {topic: $topic, partition: $partition, offset: $offset}) "
                     "SET n += $properties")


def merge_messages(messages) -> Statements:
    """Idempotent: MERGE one :KafkaMessage per (topic, partition, offset), SET its content."""
    return Statements.of_rows(MERGE_MESSAGE, _message_rows(messages))


def merge_messages_batched(messages) -> list[dict[str, Any]]:
    """Idempotent: like merge_messages, as a single UNWIND statement for the whole batch."""
    rows = _message_rows(messages)
    return [{"query": MERGE_MESSAGES_UNWIND, "parameters": {"rows": rows}}] if rows else []


def create_messages(messages) -> Statements:
    """NOT idempotent: CREATE a :KafkaMessage per delivery; a redelivered message is stored twice."""
    return Statements.of_rows(CREATE_MESSAGE, _message_rows(messages))


def json_nodes(messages) -> Statements:
    """Idempotent: MERGE a :KafkaRecord per (topic, partition, offset) and SET the payload's
    JSON object fields on it (`SET +=`: replaying rewrites the same values).

    A payload that is not a JSON object fails the batch with its offset named. A field holding an object (or a
    list holding one) is stored as its JSON text: not every graph engine stores a map as a property value
    (FalkorDB refuses one; docs: sinks), and the statement must give the same graph on each.
    """
    consumed = _consumed(messages)
    if consumed is not None:
        rows = [{"topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
                 "properties": _storable_fields(_json_payload(m.value(), m))} for m in consumed]
    else:
        rows = []
        for message in _each(messages):
            parameters = _position(message)
            parameters["properties"] = _storable_fields(_json_object(message))
            rows.append(parameters)
    return Statements.of_rows(MERGE_JSON_RECORD, rows)


def consumer_offsets(messages) -> Statements:
    """Idempotent: Kafka's `__consumer_offsets` records as commit timelines and current offsets per group.

    Offset commits (key versions 0-1, value versions 0-3) become
    `(:ConsumerGroup {name})-[:COMMITTED {offset, committed_at, metadata}]->(:Partition {topic, partition})
    -[:OF]->(:Topic {name})`, one COMMITTED per commit, and move the group's one
    `-[:AT {offset, committed_at}]->` the partition; a tombstone removes AT; group
    metadata records are skipped; malformed records are skipped and counted (logged).
    """
    return offset_commits.statements(messages)


def debezium(messages, options=None) -> list[dict[str, Any]]:
    """Idempotent and order-safe: Debezium change events mirror the tables the stream names (see cdc's docstring).

    {"tables": ["inventory.customers"]} (required) names what it mirrors; a node per row, labelled by its
    schema-qualified table (`labels` renames: {"labels": {"inventory.customers": "Customer"}}), keyed by the event
    key's primary key columns, carrying the stream's mark (`mark`); reads, creates and updates set its properties
    to the row (TOASTed columns keep theirs), deletes DETACH DELETE it, truncates delete the table's nodes
    ({"truncate": "ignore"} keeps them), a complete snapshot removes the rows it did not read; foreign keys become
    relationships with {"relationships": {"inventory.orders": {"purchaser": {"type": "PURCHASED_BY", "label":
    "Customer", "key": "id"}}}}. An event older than what the graph holds (by source position) changes nothing.
    """
    return cdc.statements(_each(messages), options)


debezium.check_options = cdc.CdcOptions.parse   # type: ignore[attr-defined]   # checked at create (the loader)


def _each(messages):
    """Through message_at/total_messages, the accessors both kinds of Messages offer."""
    return map(messages.message_at, range(messages.total_messages()))


def _position(message) -> dict[str, Any]:
    return {"topic": message.topic_name(), "partition": message.partition(), "offset": message.offset()}


def _consumed(messages):
    """The consumed confluent_kafka messages of an undecoded batch of ours, else None (read through the
    accessors then)."""
    read = getattr(messages, "kafka_messages", None)
    return read() if read is not None else None


def _message_rows(messages) -> list[dict[str, Any]]:
    consumed = _consumed(messages)
    if consumed is None:
        return [_message_row(m) for m in _each(messages)]
    return [{"topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
             "payload": "" if (value := m.value()) is None else str(value, "utf-8", "replace"),
             "key": None if (key := m.key()) is None else str(key, "utf-8", "replace"),
             "timestamp": m.timestamp()[1]} for m in consumed]


def _message_row(message) -> dict[str, Any]:
    value, key = _decoded(message, "value", "payload"), _decoded(message, "key_value", "key")
    return {"topic": message.topic_name(), "partition": message.partition(), "offset": message.offset(),
            "payload": "" if value is None else _text(value), "key": None if key is None else _text(key),
            "timestamp": message.timestamp()}


def _decoded(message, accessor: str, raw: str) -> Any:
    """The decoded value or key when the stream has a format (`value()`/`key_value()`, which mgstreams messages
    have and Memgraph's do not), else the raw bytes."""
    read = getattr(message, accessor, None)
    return read() if read is not None else getattr(message, raw)()


def _text(data) -> str:
    """Bytes as UTF-8 text; a decoded value (a map, a number) as its JSON text."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return str(data, "utf-8", "replace")
    if isinstance(data, str):
        return data
    return json.dumps(data, default=str, ensure_ascii=False)


def _storable_fields(record: dict[str, Any]) -> dict[str, Any]:
    return {key: _storable(value) for key, value in record.items()}


def _storable(value: Any) -> Any:
    """A property value every engine stores: a map, or a list holding one, as its JSON text."""
    if isinstance(value, dict) or isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return value


def _json_object(message) -> dict[str, Any]:
    decoded = _decoded(message, "value", "payload")
    if isinstance(decoded, dict):   # a format is set: the decoded record
        return decoded
    return _json_payload(message.payload(), message)


def _json_payload(payload: bytes | None, message) -> dict[str, Any]:
    """A payload's JSON object; ValueError naming the message's position when it is not one."""
    try:
        value = json.loads(b"" if payload is None else bytes(payload))
    except ValueError as exc:
        where = _where(message)
        raise ValueError(f"payload at {where} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        where = _where(message)
        raise ValueError(f"payload at {where} is a JSON {type(value).__name__}, expected an object")
    return value


def _where(message) -> str:
    """A message's position (a Message of ours or Memgraph's, or a consumed confluent_kafka message)."""
    if hasattr(message, "topic_name"):
        return f"{message.topic_name()}:{message.partition()} offset {message.offset()}"
    return f"{message.topic()}:{message.partition()} offset {message.offset()}"
