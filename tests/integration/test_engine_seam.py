"""The engine seam (stream_registry/registry/runners/engine.py): an engine handed to the registry by name runs a stream
as a peer of the built-in Kafka one, through the same calls: start and stop, the status it reports, an offset
change handed to it and recorded once it reports it persisted, the history. The engine here is a stand-in for a
Spark query (issue 47 brings the real one): it runs nothing and reports what an engine must."""
from __future__ import annotations

import threading

import pytest
from stream_helpers import wait_until

from stream_registry import ChangeStatus, StreamConfig, StreamRegistry, StreamStatus
from stream_registry.errors import ConfigError, StreamNotFound
from stream_registry.model import GateEvent, MoveState, PartitionKey, WorkerSnapshot
from stream_registry.registry.runners.engine import RunRequest


class QueryStandIn:
    """A StreamRunner that holds every partition of its topics and persists each offset change it is handed."""

    def __init__(self, request: RunRequest, partitions: int):
        self.request = request
        self.config = request.config
        self.held = frozenset(PartitionKey(t, p) for t in self.config.topics for p in range(partitions))
        self.pending = dict(request.pending())
        self.alive = self.stopping = False
        self.handed: list[tuple[int, dict]] = []
        self.pid, self.pids, self.restarts = None, (), 0

    def start(self, timeout: float = 30.0) -> None:
        self.alive = True
        threading.Thread(target=self.request.events.on_status, args=(StreamStatus.RUNNING, None)).start()

    def stop(self, timeout: float) -> str | None:
        self.stopping, self.alive = True, False
        return None

    def snapshot(self) -> WorkerSnapshot:
        return WorkerSnapshot(assigned=self.held, positions={tp: 0 for tp in self.held})

    def request_offsets(self, change_id, offsets, onward=frozenset(), supersedes=None) -> None:
        self.handed.append((change_id, dict(offsets)))
        events = [GateEvent(change_id=change_id, topic=tp.topic, partition=tp.partition, offset=offset,
                            state=MoveState.PERSISTED, previous_offset=0,
                            more=i < len(offsets) - 1) for i, (tp, offset) in enumerate(sorted(offsets.items()))]
        threading.Thread(target=lambda: [self.request.events.on_change(e) for e in events]).start()

    def cancel_pending(self, timeout, up_to=None):
        return []

    def forget(self, change_id, tps) -> None:
        pass

    def rss_bytes(self) -> int | None:
        return None

    def close(self) -> None:
        pass


def test_an_engine_handed_in_by_name_runs_a_stream_beside_the_kafka_one(kafka, tmp_path, memory_sinks):
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 10, partitions=2)
    made: list[QueryStandIn] = []

    def query_engine(request: RunRequest) -> QueryStandIn:
        made.append(QueryStandIn(request, partitions=2))
        return made[-1]
    registry = StreamRegistry(tmp_path / "state", engines={"query": query_engine},
                              engine_of=lambda config: "query" if config.name.startswith("q") else "kafka")
    try:
        for name in ("q1", "orders"):
            registry.create(StreamConfig(name, [topic], kafka.bootstrap_servers, "stream_helpers.offsets_transform",
                                         f"memory://{name}", consumer_group=f"g_{name}_{topic}",
                                         batch_interval_ms=20))
        registry.set_offset("q1", 2)   # stopped: pending, handed to the engine when it starts
        registry.start("q1")
        registry.start("orders")
        assert len(made) == 1 and made[0].config.name == "q1"
        assert {tp: move.offset for tp, move in made[0].pending.items()} == {PartitionKey(topic, p): 2 for p in (0, 1)}
        wait_until(lambda: registry.get("q1").status == StreamStatus.RUNNING, 10, what="the engine's status")
        changes = registry.set_offset("q1", 4, timeout=10)
        assert {c.status for c in changes} == {ChangeStatus.APPLIED}, changes
        assert made[0].handed[-1][1] == {PartitionKey(topic, 0): 4, PartitionKey(topic, 1): 4}
        assert [h.offset for h in registry.history("q1")][-2:] == [4, 4]
        wait_until(lambda: len(memory_sinks["orders"].delivered()) == 10, 30, what="the kafka stream beside it")
        assert registry.stop("q1").status == StreamStatus.STOPPED and made[0].stopping
    finally:
        registry.close()


def test_a_stream_whose_engine_this_host_lacks_is_refused_naming_the_engine(kafka, tmp_path):
    """Refused at create (before anything is stored or the cluster is asked), naming the engine and what the host
    has: a stream this host could never start is not created."""
    topic = kafka.new_topic(partitions=1)
    registry = StreamRegistry(tmp_path / "state", engine_of=lambda config: "spark")
    try:
        with pytest.raises(ConfigError, match=r"^engine: 'spark' cannot run on this host \(known here: kafka\)"):
            registry.create(StreamConfig("s", [topic], kafka.bootstrap_servers, "stream_helpers.offsets_transform",
                                         "null://"))
        with pytest.raises(StreamNotFound):
            registry.get("s")
    finally:
        registry.close()
