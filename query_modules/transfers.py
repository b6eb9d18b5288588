"""Demo transformation: account transfers from Kafka into the graph.

Payload: {"transfer_id": "t-1", "from": "acc-1", "to": "acc-2", "amount": 12.5,
          "currency": "EUR", "ts": "2026-11-22T10:00:00Z"}

One statement per message: MERGE both accounts, MERGE the TRANSFER keyed by
transfer_id and SET its fields, so a redelivered message (at-least-once, Spark
retries, backfills) changes nothing. Runs in Memgraph (`TRANSFORM transfers.transfer`)
and in mgstreams (`load_transformation("transfers.transfer")`).
Suggested indexes: CREATE INDEX ON :Account(id);

No `from __future__ import annotations` here: mgp.transformation checks the
parameter annotation is `mgp.Messages` itself.
"""
import json

import mgp

TRANSFER_QUERY = (
    "MERGE (src:Account {id: $from_account}) "
    "MERGE (dst:Account {id: $to_account}) "
    "MERGE (src)-[t:TRANSFER {transfer_id: $transfer_id}]->(dst) "
    "SET t.amount = $amount, t.currency = $currency, t.ts = $ts, "
    "t.kafka_topic = $kafka_topic, t.kafka_partition = $kafka_partition, t.kafka_offset = $kafka_offset"
)
REQUIRED = ("transfer_id", "from", "to", "amount", "currency", "ts")


@mgp.transformation
def transfer(messages: mgp.Messages) -> mgp.Record(query=str, parameters=mgp.Nullable[mgp.Map]):
    records = []
    for i in range(messages.total_messages()):
        message = messages.message_at(i)
        records.append(mgp.Record(query=TRANSFER_QUERY, parameters=_parameters(message)))
    return records


def _parameters(message) -> dict:
    where = f"{message.topic_name()} offset {message.offset()}"
    try:
        body = json.loads(bytes(message.payload()))
    except ValueError as exc:
        raise ValueError(f"transfer at {where}: payload is not JSON ({exc})") from None
    missing = [name for name in REQUIRED if not isinstance(body, dict) or name not in body]
    if missing:
        raise ValueError(f"transfer at {where}: payload lacks {', '.join(missing)}")
    amount = body["amount"]
    if isinstance(amount, bool) or not isinstance(amount, (int, float)):
        raise ValueError(f"transfer at {where}: amount must be a number, got {amount!r}")
    # Memgraph's own messages have no partition(); mgstreams' do.
    partition = message.partition() if hasattr(message, "partition") else None
    return {
        "transfer_id": str(body["transfer_id"]),
        "from_account": str(body["from"]),
        "to_account": str(body["to"]),
        "amount": float(amount),
        "currency": str(body["currency"]),
        "ts": str(body["ts"]),
        "kafka_topic": message.topic_name(),
        "kafka_partition": partition,
        "kafka_offset": message.offset(),
    }
