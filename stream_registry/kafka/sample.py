"""A few records from chosen offsets, for a preview: read as a bystander, never as the stream's consumer.

The reader `assign()`s the partitions (it never joins a group, so the stream's
group does not rebalance), uses a group id of its own that is never committed
to (auto-commit off, no commit call), and stops each partition after `limit`
records or at the end the caller gives (the log end when the preview was
planned: transaction markers and compaction leave gaps, so a partition also
ends at its EOF event, never by waiting for a record that does not exist).
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Mapping

from confluent_kafka import KafkaError, TopicPartition

from ..config import StreamConfig
from ..errors import KafkaOperationError
from ..model import PartitionKey
from ..redaction import redact
from .client import new_consumer
from .messages import message_key, message_offset

_CONSUME_WAIT_S = 0.2
# Settings that would make the reader a member of something (or commit on its behalf).
_MEMBERSHIP = ("group.instance.id", "group.protocol", "group.remote.assignor", "partition.assignment.strategy")


def read_records(config: StreamConfig, starts: Mapping[PartitionKey, int], ends: Mapping[PartitionKey, int], limit: int,
                 timeout: float) -> dict[PartitionKey, list]:
    """Up to `limit` confluent_kafka Messages per partition from `starts[tp]` (exclusive end `ends[tp]`)."""
    wanted = {tp: start for tp, start in starts.items() if start < ends[tp]}
    out: dict[PartitionKey, list] = {tp: [] for tp in starts}
    if not wanted or limit <= 0:
        return out
    secrets = config.secret_values()
    conf = {k: v for k, v in config.client_config().items() if k not in _MEMBERSHIP}
    conf.update({"group.id": f"mgstreams-check-{uuid.uuid4().hex}", "enable.auto.commit": False,
                 "enable.auto.offset.store": False, "enable.partition.eof": True, "fetch.wait.max.ms": 20})
    consumer = new_consumer(conf, secrets)
    try:
        consumer.assign([TopicPartition(t, p, o) for (t, p), o in wanted.items()])
        reading = set(wanted)
        deadline = time.monotonic() + timeout
        while reading:
            left = deadline - time.monotonic()
            if left <= 0:
                shown = ", ".join(f"{t}:{p}" for t, p in sorted(reading))
                raise KafkaOperationError(f"check: reading {shown} did not finish within {timeout:g} s")
            for msg in consumer.consume(500, min(left, _CONSUME_WAIT_S)):
                tp = message_key(msg)
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        reading.discard(tp)
                    elif error.fatal() or not error.retriable():
                        raise KafkaOperationError(f"check: reading {msg.topic()}:{msg.partition()} failed: "
                                                  f"{redact(error.str(), secrets)}", code=error.name(),
                                                  topic=msg.topic(), partition=msg.partition())
                    continue
                if tp is None or tp not in reading:
                    continue
                out[tp].append(msg)
                if len(out[tp]) >= limit or message_offset(msg) + 1 >= ends[tp]:
                    reading.discard(tp)
    finally:
        consumer.close()
    return out
