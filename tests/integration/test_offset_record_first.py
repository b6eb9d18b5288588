"""Issue 45: an offset change is handed to the stream while its record's commit (and fsync) is under way, so the
seek and the fetch overlap it; nothing of the change is persisted (committed, delivered from its target) before
the record is durable, and a change whose record is not written is never applied (engine.RecordsMeanwhile)."""
from __future__ import annotations

import sqlite3

import pytest
from confluent_kafka import Consumer, TopicPartition
from stream_helpers import FAST_REJOIN, by_partition, wait_until

from stream_registry import ChangeStatus, StreamConfig, StreamError
from stream_registry.registry.state.state_store import StateStore


def test_nothing_is_persisted_before_the_record_is_durable_and_a_change_not_recorded_is_never_applied(
        kafka, registry, memory_sinks, monkeypatch):
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 40, partitions=2)
    registry.create(StreamConfig(name="overlap", topics=[topic], bootstrap_servers=kafka.bootstrap_servers,
                                 transform="stream_helpers.offsets_transform", sink="memory://overlap",
                                 consumer_group=f"g_{topic}", batch_size=10, configs=FAST_REJOIN))
    registry.start("overlap")
    sink = memory_sinks["overlap"]
    wait_until(lambda: len(sink.delivered()) >= 40, 60, what="both partitions read to their end")

    group = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": f"g_{topic}"})   # never joins

    def committed():   # asked of the cluster, not of the registry (whose stream lock the call holds)
        return {tp.partition: tp.offset for tp in group.committed([TopicPartition(topic, p) for p in (0, 1)], 10)}

    def positions():   # the stream's gate, as its runner shows it
        return {tp.partition: offset for tp, offset in runner.snapshot().positions.items()}
    wait_until(lambda: committed() == {0: 20, 1: 20}, 30, what="both partitions committed at their end")
    runner = registry._table.view("overlap")[1]
    original = StateStore.add_change
    while_unrecorded = {}

    def add_change_whose_commit_fails(self, name, rows, supersede, replaces=None, sink_change=False,
                                      before_commit=None):
        def hand_off_then_fail(change_id):
            before_commit(change_id)   # the stream has the change; its record is not committed
            # the gate moved both partitions (sought to 5) and waits for the record: nothing committed meanwhile
            wait_until(lambda: positions() == {0: 5, 1: 5}, 30,
                       what="the gate moved both partitions while the record is not durable")
            while_unrecorded.update(committed())
            raise sqlite3.OperationalError("disk I/O error (the commit of the change's record failed)")
        return original(self, name, rows, supersede, replaces, sink_change, before_commit=hand_off_then_fail)

    monkeypatch.setattr(StateStore, "add_change", add_change_whose_commit_fails)
    with pytest.raises(StreamError, match="disk I/O error"):
        registry.set_offset("overlap", 5, timeout=30)
    assert while_unrecorded == {0: 20, 1: 20}   # not persisted while its record was not durable
    # the gate drops it: moved back to where each partition stood, never committed, nothing delivered from 5
    wait_until(lambda: positions() == {0: 20, 1: 20}, 30, what="both partitions moved back")
    assert committed() == {0: 20, 1: 20}
    assert registry.pending("overlap") == [] and registry.history("overlap") == []
    assert len(sink.delivered()) == 40

    monkeypatch.setattr(StateStore, "add_change", original)   # a later change is recorded, and applied
    changes = registry.set_offset("overlap", 7, timeout=30)
    assert {(c.partition, c.status) for c in changes} == {(0, ChangeStatus.APPLIED), (1, ChangeStatus.APPLIED)}
    wait_until(lambda: {tp: offsets[0] for tp, offsets in by_partition(sink.delivered()[40:]).items()} ==
               {(topic, 0): 7, (topic, 1): 7}, 30, what="delivery from the recorded change's target")
    assert [(h.partition, h.offset) for h in sorted(registry.history("overlap"), key=lambda h: h.partition)] == \
        [(0, 7), (1, 7)]
    group.close()
