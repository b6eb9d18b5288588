"""A stream's health (stream_registry/registry/stream/health.py) without a consumer: the status and error it shows, an
outage confirmed by a probe and cleared by the next answer, a wait for the sink shown until it ends."""
from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from stream_registry.model import StreamStatus
from stream_registry.registry.stream.health import OUTAGE_PROBE_S, QUIET_PROBE_S, Health
from stream_registry.registry.stream.stream_events import StreamEvents


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def health_with(probe_fails: list[bool]):
    statuses, outages, probes = [], [], []
    clock = Clock()

    def probe():
        probes.append(clock.now)
        if probe_fails[0]:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "connection refused"))
    events = StreamEvents(on_status=lambda s, e: statuses.append((s, e)), on_outage=outages.append)
    return Health("orders", events, probe, lambda v: str(v).replace("hunter2", "***"), clock), statuses, outages, \
        probes, clock


def test_an_outage_is_shown_once_a_probe_confirms_it_and_clears_when_the_cluster_answers():
    fails = [True]
    health, statuses, outages, probes, clock = health_with(fails)
    health.set_status(StreamStatus.RUNNING)
    health.check_cluster()
    assert probes == [], "nothing suspected: no probe"
    health.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "3/3 brokers are down"))
    health.check_cluster()
    assert health.status is StreamStatus.RUNNING
    assert health.error.startswith("all brokers down since ") and "3/3 brokers are down" in health.error
    assert len(outages) == 1 and outages[0] is not None
    health.check_cluster()
    assert len(probes) == 1, "at most one probe a second"
    fails[0] = False
    clock.now += OUTAGE_PROBE_S
    health.check_cluster()
    assert health.error is None and outages[-1] is None
    assert statuses[-1] == (StreamStatus.RUNNING, None)


def test_one_failed_probe_without_a_hint_is_no_outage_and_an_answering_cluster_clears_the_suspicion():
    fails = [False]
    health, statuses, outages, probes, clock = health_with(fails)
    health.set_status(StreamStatus.RUNNING)
    health.on_error(KafkaError(KafkaError._TRANSPORT, "one broker went away"))
    health.check_cluster()
    assert health.error is None and outages == [] and len(probes) == 1
    fails[0] = True
    clock.now += OUTAGE_PROBE_S
    health.check_cluster()
    assert probes == [100.0], "the suspicion ended with the answer: no more probes"


def test_authentication_failures_are_named_and_redacted():
    health, _, _, _, _ = health_with([True])
    health.set_status(StreamStatus.RUNNING)
    health.on_error(KafkaError(KafkaError._AUTHENTICATION, "SASL failed for password hunter2"))
    health.check_cluster()
    assert health.error.startswith("SASL authentication failed: ") and "hunter2" not in health.error


def test_a_commit_waiting_during_an_outage_gives_up_once_no_broker_answers():
    fails = [True]
    health, _, _, probes, _ = health_with(fails)
    health.set_status(StreamStatus.RUNNING)
    assert health.outage_confirmed() is True
    assert "no broker answers while a commit waits" in health.error


def test_a_wait_for_the_sink_is_the_error_until_it_ends_and_a_stop_shows_none():
    health, statuses, _, _, _ = health_with([False])
    health.set_status(StreamStatus.RUNNING)
    health.waiting = "reading the offsets stored in the sink failed; its partitions wait for the sink"
    health.refresh()
    assert statuses[-1] == (StreamStatus.RUNNING, health.waiting)
    health.waiting = None
    health.refresh()
    assert statuses[-1] == (StreamStatus.RUNNING, None)
    count = len(statuses)
    health.refresh()
    assert len(statuses) == count, "an unchanged status is not reported again"
    health.waiting = "still waiting"
    health.set_status(StreamStatus.STOPPED)
    assert statuses[-1] == (StreamStatus.STOPPED, None)


def test_an_idle_loop_that_hears_nothing_probes_and_shows_an_outage_after_two_misses():
    """Issue 42: no records, no error callback (brokers gone quietly while idle): after QUIET_PROBE_S the cluster
    is probed; two failed probes in a row show the outage, an answer or records heard put the watchdog back."""
    fails = [False]
    health, statuses, outages, probes, clock = health_with(fails)
    health.set_status(StreamStatus.RUNNING)
    clock.now += QUIET_PROBE_S - 1
    health.check_cluster()
    assert probes == [], "not quiet for long enough"
    health.heard()
    clock.now += QUIET_PROBE_S - 1
    health.check_cluster()
    assert probes == [], "records heard: the watchdog waits again"
    clock.now += 1
    health.check_cluster()
    assert len(probes) == 1 and health.error is None, "quiet: probed, the cluster answers"
    fails[0] = True
    clock.now += QUIET_PROBE_S
    health.check_cluster()
    assert len(probes) == 2 and health.error is None and outages == [], "one miss may be load"
    clock.now += OUTAGE_PROBE_S
    health.check_cluster()
    assert health.error.startswith("all brokers down since ") and "nothing heard" in health.error
    assert len(outages) == 1
    fails[0] = False
    clock.now += OUTAGE_PROBE_S
    health.check_cluster()
    assert health.error is None and outages[-1] is None
