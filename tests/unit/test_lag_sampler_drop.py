"""The lag sampler's round when a stream is dropped in the middle of it (found by the fuzz's create-drop probes:
the round raised StreamNotFound from the pending count and the host logged a traceback)."""
from __future__ import annotations

from stream_registry.errors import StreamNotFound
from stream_registry.lag.collector import LagCollector
from stream_registry.model import StreamInfo, StreamStatus, Verdict


class DroppedMidRound:
    """A registry whose one stream is listed and described, then dropped before its pending changes are asked."""

    def __init__(self):
        self.info = StreamInfo(name="orders", topics=("t",), consumer_group="g", bootstrap_servers="b",
                               transform="x.y", sink="null://", status=StreamStatus.STOPPED, error=None, configs={},
                               credentials={}, batch_size=1, batch_interval_ms=1)

    def list(self):
        return [self.info]

    def describe(self, name):
        return []

    def history(self, name, limit=None):
        return []

    def pending(self, name):
        raise StreamNotFound(f"name: no stream named {name!r}")


def test_a_stream_dropped_during_a_round_is_sampled_as_not_found_not_raised():
    collector = LagCollector(DroppedMidRound(), read_timestamps=False)
    collector.sample()   # raised StreamNotFound before
    latest = collector._tracked["orders"].latest
    assert latest is not None and latest.status is Verdict.ERR and "no stream named 'orders'" in latest.error
