"""A running stream's health: its status and error, a cluster outage, why it must fail.

The status a stream shows is the poll thread's (starting, running, error, stopped);
its error says what is wrong while it runs: a confirmed outage (no broker answers,
probed at most once a second once librdkafka's error callback hinted at one; one
broker of several down is not an outage), or partitions waiting for an
exactly-once sink that does not answer (assignment.py sets that text). Both clear
by themselves when the cluster or the sink answers again. A loop that hears nothing
(no records, no error callback: an idle stream whose brokers went away quietly)
probes the cluster once every QUIET_PROBE_S, so an outage reaches its error
within 30 s from that state too. The probe is a metadata request through a client
of its own (ClusterProbe), never through the stream's consumer: confluent-kafka
(2.16) makes every call on a consumer wait while another thread's call on it runs,
and a commit made while the cluster is down waits for it to come back (issue 42,
reproduction 5: a probe through the consumer waited 60 s behind such a commit, the
error stayed empty). A failure found inside a callback (`fatal`) is acted on by the
poll loop, never from inside the callback.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from ...kafka.client import new_admin
from ...model import StreamStatus
from .stream_events import StreamEvents

log = logging.getLogger("mgstreams.worker")

OUTAGE_PROBE_S = 1.0        # between metadata probes while an outage is suspected or on
QUIET_PROBE_S = 10.0        # the cluster probed when the consumer has reported nothing for this long (an idle loop)
UNREACHABLE = frozenset({KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._RESOLVE})


class ClusterProbe:
    """`probe()`: one metadata request within `timeout_s` (KafkaException when no broker answers), through an admin
    client of the stream's cluster and security settings, made at the first probe and kept."""

    def __init__(self, client_config: Mapping[str, object], secrets: Iterable[str], timeout_s: float):
        self._config, self._secrets, self._timeout_s = dict(client_config), list(secrets), timeout_s
        self._admin: AdminClient | None = None

    def __call__(self) -> object:
        if self._admin is None:
            self._admin = new_admin(self._config, self._secrets)
        return self._admin.list_topics(timeout=self._timeout_s)


class Health:
    """Status, error and outage of one stream (poll thread; `status`/`error` are read by any)."""

    def __init__(self, name: str, events: StreamEvents, probe: Callable[[], object],
                 redact: Callable[[object], str], clock: Callable[[], float] = time.monotonic):
        self._name, self._events, self._probe, self._redact, self._clock = name, events, probe, redact, clock
        self.status = StreamStatus.CREATED
        self.error: str | None = None
        self.fatal: str | None = None           # set in a callback; the poll loop fails the stream
        self.waiting: str | None = None         # partitions held back for the sink (assignment.py), shown as error
        self._suspect: str | None = None        # an error callback hinted at an outage: probe
        self.outage: str | None = None          # confirmed: shown as the stream's error until it clears
        self._outage_since: datetime | None = None
        self._next_probe = 0.0
        self._heard_at = clock()                # the consumer last delivered something (or a probe answered)
        self._quiet_misses = 0                  # failed probes of a quiet suspicion: two confirm it (one may be load)

    def set_status(self, status: StreamStatus, error: str | None = None) -> None:
        if error is None and status != StreamStatus.STOPPED:
            error = self.outage or self.waiting  # an outage stays visible until the cluster/sink answers
        if self.status == status and self.error == error:
            return
        self.status, self.error = status, error
        self._events.on_status(status, error)

    def refresh(self) -> None:
        """The status again, its error recomposed (an outage or a wait began or ended)."""
        self.set_status(self.status)

    def on_error(self, error: KafkaError) -> None:
        """librdkafka's client-level errors: a suspected outage is confirmed by a probe (check_cluster)."""
        text = self._redact(error.str())
        log.warning("stream %s: kafka: %s", self._name, text)
        if error.code() == KafkaError._AUTHENTICATION:
            self._suspect = f"SASL authentication failed: {text}"
        elif error.code() in UNREACHABLE:
            self._suspect = f"all brokers down since {{since}}: {text}"

    def outage_confirmed(self) -> bool:
        """While a commit waits or is retried: probe the cluster as the loop does (the error callback that
        hints at an outage runs only inside consume()); give up once no broker answers."""
        if self._suspect is None and self.outage is None:
            self._suspect = "all brokers down since {since}: no broker answers while a commit waits"
        self.check_cluster()
        return self.outage is not None

    def heard(self) -> None:
        """The consumer delivered records: the cluster answers (the quiet watchdog waits again)."""
        self._heard_at = self._clock()

    def check_cluster(self) -> None:
        """While an outage is suspected, ask the cluster (at most once a second) whether it answers; after
        QUIET_PROBE_S of nothing heard, suspect one (the watchdog of an idle loop)."""
        if self._suspect is None and self.outage is None and self._clock() - self._heard_at >= QUIET_PROBE_S:
            self._heard_at = self._clock()
            self._suspect = f"all brokers down since {{since}}: nothing heard from the cluster for {QUIET_PROBE_S:g} s"
            self._quiet_misses = 1
        if not (self._suspect or self.outage) or self._clock() < self._next_probe:
            return
        self._next_probe = self._clock() + OUTAGE_PROBE_S
        try:
            self._probe()
        except KafkaException:
            if self._quiet_misses == 1:   # a quiet loop's first miss: probe once more before showing an outage
                self._quiet_misses = 2
                return
            if self._suspect:
                self._outage_since = self._outage_since or datetime.now(UTC)
                self.outage = self._suspect.replace("{since}", self._outage_since.strftime("%Y-%m-%dT%H:%M:%SZ"))
                self._suspect, self._quiet_misses = None, 0
                self.set_status(self.status, self.outage)
                self._events.on_outage(self._outage_since)
            return
        self._suspect, self._quiet_misses = None, 0
        self._heard_at = self._clock()
        if self.outage:
            log.info("stream %s: the cluster answers again (%s)", self._name, self.outage)
            self.outage = self._outage_since = None
            self.set_status(self.status, None)
            self._events.on_outage(None)
