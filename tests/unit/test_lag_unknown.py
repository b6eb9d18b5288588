"""Issue 46, item 6: while a stream's cluster cannot be reached, its lag is not known, and the JSON says so: `lag`
null per partition, `total_lag` and `max_lag` null per stream, the last known values and their age in fields of
their own (`last_known_*`), kept over every round of the outage. Before, the JSON carried the last lag as a number,
flagged only by `cluster_up: false`. Through the host's real lag sampler and the wire encoding; the host process
view is tests/host/test_outages_host.py."""
from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from mgstreams.wire import to_json
from stream_registry.errors import KafkaOperationError
from stream_registry.lag.collector import LagCollector
from stream_registry.lag.outage import last_known_offsets
from stream_registry.model import PartitionOffsets, StreamInfo, StreamStatus, Verdict


class Clock:
    def __init__(self, now: float = 1_800_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


class Cluster:
    """A registry whose one running stream has two partitions (lag 3 and 4) until its cluster goes away."""

    def __init__(self):
        self.away = False
        self.info = StreamInfo(name="orders", topics=("t",), consumer_group="g", bootstrap_servers="b:9092",
                               transform="x.y", sink="null://", status=StreamStatus.RUNNING, error=None, configs={},
                               credentials={}, batch_size=1, batch_interval_ms=1, pid=4242)

    def list(self):
        return [self.info]

    def get(self, name):
        return self.info

    def describe(self, name):
        if self.away:
            raise KafkaOperationError("describe: no broker answers", code="_ALL_BROKERS_DOWN")
        return [PartitionOffsets(topic="t", partition=p, committed_offset=10, position=10, log_start_offset=0,
                                 log_end_offset=10 + lag, lag=lag, assigned=True) for p, lag in ((0, 3), (1, 4))]

    def history(self, name, limit=None):
        return []

    def pending(self, name):
        return []


def test_an_unreachable_cluster_makes_lag_null_with_the_last_known_value_and_its_age_beside_it():
    clock, cluster = Clock(), Cluster()
    collector = LagCollector(cluster, interval=1.0, read_timestamps=False, clock=clock)
    collector.sample()
    known = to_json(collector.lag("orders"))
    assert (known["total_lag"], known["max_lag"], [p["lag"] for p in known["partitions"]]) == (7, 4, [3, 4])
    assert known["last_known_total_lag"] is None and known["partitions"][0]["last_known_lag"] is None
    sampled_at = known["sampled_at"]

    cluster.away = True   # and the stream's consumer finds no broker answering (its probe confirmed it)
    cluster.info = dataclasses.replace(cluster.info, cluster_unreachable_since=datetime.fromtimestamp(clock.now, UTC))
    for round_ in range(3):   # every round of the outage keeps the last known values, never a None in their place
        clock.now += 5
        collector.sample()
        lag = to_json(collector.lag("orders"))
        assert lag["status"] == "ERR" and lag["cluster_up"] is False, lag
        assert (lag["total_lag"], lag["max_lag"], lag["max_lag_seconds"]) == (None, None, None), lag
        assert (lag["last_known_total_lag"], lag["last_known_max_lag"], lag["last_known_at"]) == (7, 4, sampled_at)
        assert lag["last_known_age_s"] == 5.0 * (round_ + 1), lag
        assert [(p["lag"], p["lag_seconds"], p["last_known_lag"], p["last_known_at"], p["last_known_age_s"])
                for p in lag["partitions"]] == [(None, None, 3, sampled_at, lag["last_known_age_s"]),
                                                (None, None, 4, sampled_at, lag["last_known_age_s"])], lag
        assert [p["message"].rpartition("last known at ")[2].split(": ", 1)[1] for p in lag["partitions"]] == \
            ["lag 3, committed 10", "lag 4, committed 10"], lag
        assert to_json(collector.streams()) == [lag]   # GET /lag as GET /streams/{name}/lag

    rows = to_json(last_known_offsets(collector.latest()[0], clock.now))   # describe's rows meanwhile
    assert [(r["lag"], r["last_known_lag"], r["last_known_at"], r["last_known_age_s"], r["position"]) for r in rows] \
        == [(None, 3, sampled_at, 15.0, None), (None, 4, sampled_at, 15.0, None)], rows

    cluster.away = False   # the first round that reaches it again: known, no last known values left
    cluster.info = dataclasses.replace(cluster.info, cluster_unreachable_since=None)
    clock.now += 5
    collector.sample()
    back = to_json(collector.lag("orders"))
    assert back["total_lag"] == 7 and back["cluster_up"] and back["status"] != Verdict.ERR.value, back
    assert back["last_known_total_lag"] is None and back["last_known_age_s"] is None
    assert all(p["last_known_lag"] is None and p["lag"] is not None for p in back["partitions"]), back


def test_a_stream_not_sampled_yet_has_no_lag_rather_than_zero():
    collector = LagCollector(Cluster(), interval=1.0, read_timestamps=False)
    collector._thread = object()   # a sampler that has not run its first round: readers never sample themselves
    lag = to_json(collector.lag("orders"))
    assert (lag["total_lag"], lag["max_lag"], lag["sampled_at"]) == (None, None, None), lag
    assert "not sampled yet" in lag["message"]
