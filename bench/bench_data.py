"""Bench input: fast, compressed production of JSON payloads of a given size, and its check."""
from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition


def produce(bootstrap: str, topic: str, count: int, partitions: int, size: int, poison_every: int = 0,
            value_of=None) -> None:
    """`count` messages of about `size` bytes, message i to partition i % partitions.

    With `poison_every` N, one message in N (i % N == N // 2) is not JSON: a poison message for a
    transformation that reads JSON (poison_count says how many).

    zstd batches: the embedded broker keeps at most 5 MiB (compressed) per
    partition and drops the oldest batches beyond that; compressed, millions of
    200 B messages fit. Consumers decompress in C, the same for every side.

    `value_of(i, record)`, when given, makes message i's value (or its (key, value)) from its record (the JSON
    payload's fields as a dict): another encoding of the same data (bench/ingest_throughput.py --value-format
    avro), or a change event made of it (--transform debezium).
    """
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "batch.num.messages": 100_000, "compression.type": "zstd",
                         "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576})
    failures = []

    def delivered(err, _msg):
        if err is not None:
            failures.append(err)

    for i in range(count):
        head = b'{"id": %d, "user": "u%05d", "amount": %d.%02d, "pad": "' % (i, (i * 7919) % 100_000,
                                                                            i % 997, i % 100)
        value = head + b"x" * max(0, size - len(head) - 2) + b'"}'
        if is_poison(i, poison_every):
            value = b"not json: " + value
        key = b"k%d" % (i % 1000)
        if value_of is not None and not is_poison(i, poison_every):
            made = value_of(i, record_of(value))
            key, value = made if isinstance(made, tuple) else (key, made)
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=i % partitions,
                                 on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 20_000 == 0:
            producer.poll(0)
    if producer.flush(120) or failures:
        raise SystemExit(f"bench: {len(failures)} messages were not delivered "
                         f"({failures[0] if failures else 'flush timed out'})")


def record_of(value: bytes) -> dict:
    import json
    return json.loads(value)


def is_poison(i: int, poison_every: int) -> bool:
    return bool(poison_every) and i % poison_every == poison_every // 2


def poison_count(count: int, poison_every: int) -> int:
    return sum(1 for i in range(count) if is_poison(i, poison_every))


def check_topic(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    """Every produced message is still on the broker (log start 0, ends summing to count)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench_check"})
    try:
        marks = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(partitions)]
    finally:
        consumer.close()
    if any(low != 0 for low, _ in marks) or sum(high for _, high in marks) != count:
        raise SystemExit(f"bench: topic {topic} does not hold all {count} messages: watermarks {marks}")
