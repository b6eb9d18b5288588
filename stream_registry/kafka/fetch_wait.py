"""A consumer's fetch wait, shortened while an offset change is on its way.

A broker holds a caught-up partition's Fetch up to fetch.wait.max.ms (CONSUMER_DEFAULTS: 3 ms), and librdkafka
keeps one Fetch in flight per broker: a seek waits for the fetch in flight to come back before the fetch from the
target is sent (rdkafka_broker.c, rd_kafka_broker_consumer_serve: a new Fetch only when none is in flight). On an
idle stream that is up to fetch.wait.max.ms per broker after the seek, the longest of them counting (a `tasks: 2`
stream waits for the longest of its members' too). A shorter wait for good costs CPU on both sides while the
stream idles (bench/idle_fetch_cost.py, a stream process at the end of 6 partitions over 3 brokers, stream and
embedded brokers together: 4.2 % of a core at 5 ms, 5.4 % at 3 ms, 6.9 % at 2 ms; on a real cluster up to
1000 / fetch.wait.max.ms Fetch requests a second per broker per idle stream). 3 ms, not 5, because with 5 the
fetches in flight when a call is announced (about 2 ms before its seek) still held a `tasks: 2` stream's first
records: bench/offset_latency.py, medians in three interleaved runs on 2 cores, 9.5-11.0 ms at 5, 7.5-8.3 at 3.

So the wait is short only while a change is coming: `lower()` when the host says a call is coming (before it
resolves the call's offsets, a few ms before the seek: registry/stream/calls_coming.py), or when a change is
handed over; the fetches sent from then on are held HURRY_MS at most, so by the time of the seek the fetch in
flight is a short one (measured: seek to the first record of all 6 partitions, median 6.2 -> 3.6 ms, p90 9.0 ->
6.7 ms, lowered 3 ms before the seek). `relax()` puts the configured wait back; the worker calls it between
batches, and it acts once nothing is `busy`: no call is coming any more and every moved partition delivered
from its target (or gave up hurrying: offset_gate.EARLY_DELIVERY_S).

How: librdkafka reads `rk_conf.fetch_wait_max_ms` each time it builds a Fetch request (rdkafka_fetcher.c: the
request's MaxWaitTime and its timeout, socket.timeout.ms plus it) and derives nothing else from it after
rd_kafka_new (only the check that socket.timeout.ms exceeds it by 1000, which a lower value keeps).
`rd_kafka_conf(rk)` returns that very configuration of the running handle, and `rd_kafka_conf_set` on it stores
the int in place (one aligned int: the broker threads read the old or the new value, either is valid). The
handle is reached as kafka/consumer_wake.py reaches it, and believed only when `rd_kafka_conf_get` reads back
the wait the consumer was made with; anything else, and this does nothing (the configured wait stays).
`close()` before the consumer closes (the handle must not be written once destroyed).
"""
from __future__ import annotations

import ctypes
import logging
import threading

import confluent_kafka

from .consumer_wake import consumer_handle

log = logging.getLogger("mgstreams.worker")

HURRY_MS = 1        # the fetch wait while a change is coming (0 would make an idle consumer spin with its brokers)
_KEY = b"fetch.wait.max.ms"


class FetchWait:
    """lower() (any thread) / relax() (the poll thread) a consumer's fetch.wait.max.ms; close() before the
    consumer closes. One made without a consumer (or whose handle could not be reached) does nothing."""

    def __init__(self, lib: ctypes.CDLL | None = None, conf: int | None = None, normal_ms: int = 0):
        self._lib, self._conf, self._normal = lib, conf, normal_ms
        self._lock = threading.Lock()
        self._lowered = False

    @classmethod
    def of(cls, consumer: confluent_kafka.Consumer, configured: object) -> FetchWait:
        """For `consumer` (on its poll thread, right after it was made with fetch.wait.max.ms = `configured`)."""
        try:
            normal_ms = int(str(configured))
        except ValueError:
            return cls()
        if normal_ms <= HURRY_MS:
            return cls()   # already as short: nothing to lower
        found = consumer_handle(consumer)
        if found is None:
            return cls()
        lib, rk = found
        try:
            conf = lib.rd_kafka_conf(rk)
            if not conf or _read(lib, conf) != normal_ms:
                log.debug("fetch wait not adjustable: the running configuration does not read as expected")
                return cls()
        except (OSError, ValueError, ctypes.ArgumentError) as exc:
            log.debug("fetch wait not adjustable: %s", exc)
            return cls()
        return cls(lib, conf, normal_ms)

    @property
    def active(self) -> bool:
        return self._conf is not None

    @property
    def lowered(self) -> bool:
        return self._lowered

    def lower(self) -> None:
        """A change is coming: fetches sent from now on are held HURRY_MS at most (any thread)."""
        with self._lock:
            if self._conf is not None and not self._lowered:
                self._set(HURRY_MS)
                self._lowered = True

    def relax(self, busy: bool = False) -> None:
        """The configured wait again, unless something is `busy` (a call is coming, a moved partition has not
        delivered yet); poll thread."""
        if not self._lowered or busy:
            return
        with self._lock:
            if self._lowered and self._conf is not None:
                self._set(self._normal)
            self._lowered = False

    def close(self) -> None:
        with self._lock:
            self._conf, self._lowered = None, False

    def _set(self, ms: int) -> None:
        """Under the lock, the handle open."""
        assert self._lib is not None and self._conf is not None
        error = ctypes.create_string_buffer(256)
        if self._lib.rd_kafka_conf_set(self._conf, _KEY, str(ms).encode(), error, len(error)) != 0:
            log.debug("fetch wait not adjusted: %s", error.value.decode(errors="replace"))
            self._conf = None   # never again for this consumer


def _read(lib: ctypes.CDLL, conf: int) -> int | None:
    size = ctypes.c_size_t(32)
    value = ctypes.create_string_buffer(size.value)
    if lib.rd_kafka_conf_get(conf, _KEY, value, ctypes.byref(size)) != 0:
        return None
    try:
        return int(value.value)
    except ValueError:
        return None
