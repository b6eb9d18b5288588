"""Where a consumed message sits (stream_registry.kafka.messages): a record's topic, partition and offset as
typed values, and a clear error, never a made-up offset, for an event that is no record."""
from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Message

from stream_registry.errors import KafkaOperationError
from stream_registry.kafka.messages import message_key, message_offset, record_key, record_partitions
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


def test_the_partitions_of_one_consume_are_found_when_every_message_is_a_record_and_none_when_one_is_an_event():
    records = [Message(topic="orders", partition=p, offset=o) for p, o in ((0, 1), (2, 7), (0, 2), (2, 8))]
    assert record_partitions(records) == {PartitionKey("orders", 0), PartitionKey("orders", 2)}
    other = Message(topic="payments", partition=0, offset=3)
    assert record_partitions([*records, other]) == {PartitionKey("orders", 0), PartitionKey("orders", 2),
                                                    PartitionKey("payments", 0)}
    for event in (Message(error=KafkaError(KafkaError._ALL_BROKERS_DOWN)),   # compared by identity: KafkaError's
                  Message(error=KafkaError(KafkaError._PARTITION_EOF), topic="orders", partition=1)):   # == raises
        assert record_partitions([*records, event]) is None
    assert record_partitions([]) == set()
