"""Exactly-once with `tasks: 2` on a Bolt sink: two tasks of one stream (threads of one registry here, so both
write to one pymgclient stand-in, which keeps the stored offsets a real Memgraph would) write every message once.

Each batch's transaction checks and stores its own partitions' offsets (compare-and-set per partition), and the
group gives a partition to one task at a time: a task that takes a partition over starts from the offset the
sink stores, whatever the other task wrote before it. tests/host/test_stream_tasks.py runs tasks as processes.
"""
from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError
from mgclient_standin.mgclient import Server
from stream_helpers import FAST_REJOIN, wait_until

from stream_registry import StreamConfig, StreamRegistry
from stream_registry.graph import sinks

pytestmark = pytest.mark.usefixtures("quick_rebalance")   # see conftest
PARTITIONS = 4


def test_two_tasks_on_one_bolt_sink_write_each_message_once_across_their_rebalances(own_kafka, tmp_path, monkeypatch):
    # a cluster of its own: the OffsetCommit errors it pushes are answered to any client of the cluster (conftest)
    kafka, embedded_kafka = own_kafka, own_kafka.embedded
    memgraph = Server(rtt_ms=0)
    monkeypatch.setattr(sinks.bolt, "connect_driver", memgraph.connect)
    monkeypatch.setenv("MGSTREAMS_ALLOWED_HOSTS", "memgraph,localhost,127.0.0.0/8")
    topic = kafka.new_topic(partitions=PARTITIONS)
    kafka.produce(topic, PARTITIONS * 100, partitions=PARTITIONS)   # a backlog: batches in flight at each rebalance
    registry = StreamRegistry(tmp_path / "state")
    try:
        registry.create(StreamConfig("eos_tasks", [topic], kafka.bootstrap_servers, "stream_helpers.offsets_transform",
                                     "bolt://memgraph:7687", consumer_group=f"eos_tasks_{uuid.uuid4().hex[:8]}",
                                     batch_size=10, batch_interval_ms=20, configs=FAST_REJOIN,
                                     delivery="exactly_once", tasks=2))
        registry.start("eos_tasks")
        wait_until(lambda: {r.task for r in registry.describe("eos_tasks")} == {0, 1}, 60,
                   what="both tasks holding partitions")
        # Kafka's commits fail from here on (they only feed lag tools on exactly-once): the sink's stored offsets
        # run ahead of the group's, and the tasks stop without a commit. At-least-once would read all that again.
        # (more than the retries of the owed commits can use up while the backlog is written, however slow the machine)
        embedded_kafka.push_request_errors("OffsetCommit", *[KafkaError.OFFSET_METADATA_TOO_LARGE] * 100_000)
        kafka.produce(topic, PARTITIONS * 50, partitions=PARTITIONS)
        wait_until(lambda: all(memgraph.offsets.get(("eos_tasks", topic, p)) == 150 for p in range(PARTITIONS)), 60,
                   what="every message stored")
        registry.stop("eos_tasks")   # a stop and a start: the partitions go round again, to either task
        assert any((r.committed_offset or 0) < 150 for r in registry.describe("eos_tasks")), "the commits lag"
        embedded_kafka.clear_request_errors("OffsetCommit")
        kafka.produce(topic, PARTITIONS * 50, partitions=PARTITIONS)
        registry.start("eos_tasks")
        wait_until(lambda: all(memgraph.offsets.get(("eos_tasks", topic, p)) == 200 for p in range(PARTITIONS)), 60,
                   what="the messages produced while stopped stored")
        rows = registry.describe("eos_tasks")
        assert all(r.stored_offset == 200 for r in rows), rows
    finally:
        registry.close()
    created = memgraph.created()
    assert sorted(created) == [(topic, p, o) for p in range(PARTITIONS) for o in range(200)]
    assert [key for key, n in created.items() if n != 1] == [], "each CREATE applied once"
