"""Streams whose consumer group has other members, for the host tests of the offset gate (issues 30 and 42): a
stream on a cypherl sink with range assignment (started and caught up on a topic of two partitions), a plain
confluent-kafka second member of its group, records produced to one partition, what the sink holds per partition,
what the stream holds and what the group committed."""
from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from broker_support import PRODUCER_CONFIG
from confluent_kafka import Consumer, Producer, TopicPartition
from stream_helpers import FAST_REJOIN, delivered_from_file, wait_until

RANGE = {"partition.assignment.strategy": "range", **FAST_REJOIN}


def new_stream(client, kafka, topic, out, name=None, **fields):
    """A started-later stream on `topic` writing (topic, partition, offset) lines to `out`; its name."""
    name = name or f"s_{uuid.uuid4().hex[:8]}"
    client.create(name=name, topics=[topic], bootstrap_servers=kafka.bootstrap_servers,
                  transform=fields.pop("transform", "stream_helpers.offsets_transform"), sink=f"cypherl://{out}",
                  consumer_group=fields.pop("consumer_group", f"g_{uuid.uuid4().hex[:10]}"), batch_interval_ms=20,
                  configs=RANGE, **fields)
    return name


def caught_up_stream(client, kafka, out, per_partition=100, **fields):
    """A topic of two partitions holding `per_partition` records each, a stream on it (new_stream) started and
    caught up: (topic, name)."""
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 2 * per_partition, partitions=2)
    name = new_stream(client, kafka, topic, out, **fields)
    client.start(name)
    caught_up(client, name, [per_partition, per_partition])
    return topic, name


def caught_up(client, name, offsets, timeout=60):
    """Wait until the stream's committed offsets are `offsets` (by partition)."""
    wait_until(lambda: [r.committed_offset for r in client.describe(name)] == offsets, timeout=timeout,
               what="caught up", describe=lambda: client.describe(name))


def assigned(client, name) -> set[int]:
    """The partitions the stream's consumer holds now."""
    return {r.partition for r in client.describe(name) if r.assigned}


def second_member(kafka, group, topic, assigned):
    """A second member of `group`; returns it and the partition it holds once `assigned()` (the stream's
    partitions) is down to the other one."""
    member = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": group, "enable.auto.commit": False,
                       **RANGE})
    held: list[int] = []
    member.subscribe([topic], on_assign=lambda consumer, parts: held.extend(p.partition for p in parts))
    wait_until(lambda: member.poll(0.1) is None and held, timeout=30, what="the second member's assignment")
    [theirs] = held
    wait_until(lambda: assigned() == {1 - theirs}, timeout=30, what="the stream to hold the other partition")
    return member, theirs


def produce_to(kafka, topic, partition, count, payload=b"x"):
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, **PRODUCER_CONFIG})
    for _ in range(count):
        producer.produce(topic, value=payload, partition=partition)
    assert producer.flush(30) == 0


def offsets_of(out, partition):
    """The offsets of `partition` the cypherl file holds, in file order."""
    return [o for _, p, o in delivered_from_file(out) if p == partition]


def committed(kafka, group, topic, partition):
    """The group's committed offset of the partition (and its metadata string)."""
    reader = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": group, "enable.auto.commit": False})
    try:
        [tp] = reader.committed([TopicPartition(topic, partition)], timeout=10)
        return tp.offset, tp.metadata
    finally:
        reader.close()


@contextmanager
def polling_member(kafka, group, topic) -> Iterator[set[int]]:
    """A second member of `group` that keeps polling (on a thread of its own), so it stays in the group through
    the stream's rebalances (a restart, an alter); yields the partitions it holds now (a live set). It reads
    nothing and commits nothing; it leaves at the end of the block."""
    member = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": group, "enable.auto.commit": False,
                       **RANGE})
    held: set[int] = set()
    member.subscribe([topic], on_assign=lambda consumer, parts: held.update(p.partition for p in parts),
                     on_revoke=lambda consumer, parts: held.difference_update(p.partition for p in parts))
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            member.poll(0.1)   # the records it is handed are not read: it is there to hold a partition
    thread = threading.Thread(target=poll, name="polling-member", daemon=True)
    thread.start()
    try:
        yield held
    finally:
        stop.set()
        thread.join(10)
        member.close()
