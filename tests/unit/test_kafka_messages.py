"""Where a consumed message sits (stream_registry.kafka.messages): a record's topic, partition and offset as
typed values, and a clear error, never a made-up offset, for an event that is no record."""
from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Message

from stream_registry.errors import KafkaOperationError
from stream_registry.kafka.messages import message_key, message_offset, record_key
from stream_registry.model import PartitionKey


def test_a_record_has_its_partition_key_and_offset():
    record = Message(topic="orders", partition=3, offset=41)
    assert message_key(record) == PartitionKey("orders", 3) == record_key(record)
    assert isinstance(record_key(record), PartitionKey) and message_offset(record) == 41


def test_an_event_of_no_partition_has_no_key_and_is_refused_as_a_record():
    event = Message(error=KafkaError(KafkaError._ALL_BROKERS_DOWN))
    assert message_key(event) is None
    with pytest.raises(KafkaOperationError, match="without a topic and partition"):
        record_key(event)
    with pytest.raises(KafkaOperationError, match="without an offset"):
        message_offset(event)
