"""Issue 45: a new stream (a consumer group that has committed nothing) starts its partitions where its
auto.offset.reset says in the assignment itself (data_loss.start_new), so each record is fetched and delivered once.

Before, librdkafka found no committed offset, stopped fetching and reported _AUTO_OFFSET_RESET for each partition;
the seek that placed it was refused in that state, so the stream assigned again, and on an eager group (the classic
protocol's default assignors) every partition with it: what the others had fetched ahead was dropped and fetched
again, and a partition already read could be named at its reset start once more and delivered twice (seen: 10,000
of 60,000 records delivered twice; 1.3-9.7x the records fetched). What the consumer fetched is librdkafka's own
count (its statistics, `rxmsgs` per partition), read from the stream's real consumer."""
from __future__ import annotations

import json
from collections import Counter

import pytest
from stream_helpers import FAST_REJOIN, wait_until

from stream_registry import StreamConfig
from stream_registry.registry.stream import worker

PARTITIONS, RECORDS = 6, 12_000


@pytest.fixture
def statistics(monkeypatch):
    """Every stream consumer's latest librdkafka statistics, by group id."""
    latest: dict[str, dict] = {}
    made = worker.new_consumer

    def counted(config, secrets=(), field="configs"):
        group = str(config["group.id"])
        return made({**config, "statistics.interval.ms": 100,
                     "stats_cb": lambda text: latest.__setitem__(group, json.loads(text))}, secrets, field)

    monkeypatch.setattr(worker, "new_consumer", counted)
    return latest


def _fetched(stats: dict) -> int:
    return sum(partition["rxmsgs"] for topic in stats["topics"].values()
               for number, partition in topic["partitions"].items() if number != "-1")


def _read_by_a_new_stream(kafka, registry, memory_sinks, statistics, name: str) -> tuple[list, dict]:
    """A new topic read whole by a new stream (a new group): what its sink got, its consumer's last statistics."""
    topic = kafka.new_topic(partitions=PARTITIONS)
    kafka.produce(topic, RECORDS, partitions=PARTITIONS)
    group = f"g_{topic}"
    registry.create(StreamConfig(name=name, topics=[topic], bootstrap_servers=kafka.bootstrap_servers,
                                 transform="stream_helpers.offsets_transform", sink=f"memory://{name}",
                                 consumer_group=group, batch_size=500, configs=FAST_REJOIN))
    registry.start(name)
    sink = memory_sinks[name]
    wait_until(lambda: len(set(sink.delivered())) >= RECORDS, 60, what="every record delivered")
    wait_until(lambda: group in statistics and _fetched(statistics[group]) >= RECORDS, 30,
               what="librdkafka's statistics counting every record",
               describe=lambda: statistics.get(group) and _fetched(statistics[group]))
    registry.drop(name)
    return sink.delivered(), statistics[group]


@pytest.mark.parametrize("run", range(3))   # three new groups each: the old reset rounds did not show in every one
def test_a_new_stream_fetches_and_delivers_each_record_once(kafka, registry, memory_sinks, statistics,
                                                            quick_rebalance, run):
    """A run whose group rebalanced again (a session timing out on a loaded machine: its members fetch again, rightly)
    says nothing of the start: another new group is tried, three at most."""
    for attempt in range(3):
        delivered, stats = _read_by_a_new_stream(kafka, registry, memory_sinks, statistics, f"fresh{attempt}")
        if stats["cgrp"]["rebalance_cnt"] == 1:   # the group assigned once (librdkafka's count of group rebalances)
            break
    else:
        pytest.fail("every new group rebalanced again while it read: nothing shown about the start")
    twice = {record: n for record, n in Counter(delivered).items() if n > 1}
    assert not twice, f"{len(twice)} records delivered more than once, e.g. {sorted(twice)[:3]}"
    assert _fetched(stats) == RECORDS, "each record fetched once: no partition assigned again at the start"
