"""Waking a consumer's poll thread out of `consume()` from another thread, at once.

confluent-kafka binds no wake-up (librdkafka's `rd_kafka_queue_yield` is not exposed; issues
confluentinc/confluent-kafka-python#1321, #807), so a poll thread that waits in `consume(n, timeout)` hears of a
request only when the timeout ends. `ConsumerWake` calls `rd_kafka_queue_yield` on the consumer's queue through
ctypes, in the very librdkafka confluent-kafka loaded: librdkafka sets the queue's yield flag and signals its
condition, so a `consume()` waiting on it returns at once with what it has (maybe nothing), and one called later
returns at once too (the flag stays set until a consume sees it). Nothing is consumed, committed or lost by it.

How the handle is reached: confluent-kafka's `Handle` C struct starts with `PyObject_HEAD` and then the
`rd_kafka_t *rk` (src/confluent_kafka/src/confluent_kafka.h, unchanged from 0.11 to 2.x); the pointer read there
is believed only when librdkafka names that handle a consumer (`rd_kafka_name`: "<client.id>#consumer-N") and its
type is RD_KAFKA_CONSUMER, on CPython with the GIL (a free-threaded build's object header differs). Anything else,
or any failure, and `of()` gives a wake that does nothing: the poll thread then hears of requests at the end of
its consume slice, as before. Its own queue handle is destroyed (close()) before the consumer closes, under a lock
wake() takes too, so no wake reaches a consumer being destroyed.
"""
from __future__ import annotations

import ctypes
import glob
import logging
import os
import sys
import sysconfig
import threading

import confluent_kafka

log = logging.getLogger("mgstreams.worker")

_RD_KAFKA_CONSUMER = 1
_lib: ctypes.CDLL | None = None
_lib_lock = threading.Lock()
_lib_failed = False


def _librdkafka() -> ctypes.CDLL | None:
    """The librdkafka confluent-kafka uses (the wheel's bundled copy, else the system's), declared; None if not found."""
    global _lib, _lib_failed
    with _lib_lock:
        if _lib is not None or _lib_failed:
            return _lib
        pkg_dir = os.path.dirname(confluent_kafka.__file__)
        candidates = sorted(glob.glob(os.path.join(os.path.dirname(pkg_dir), "confluent_kafka.libs", "librdkafka*.so*"))
                            + glob.glob(os.path.join(pkg_dir, ".dylibs", "librdkafka*.dylib")))
        for path in candidates + ["librdkafka.so.1", "librdkafka.so"]:
            try:
                lib = ctypes.CDLL(path)
                vp = ctypes.c_void_p
                for name, args, res in (("rd_kafka_name", [vp], ctypes.c_char_p), ("rd_kafka_type", [vp], ctypes.c_int),
                                        ("rd_kafka_queue_get_consumer", [vp], vp),
                                        ("rd_kafka_queue_yield", [vp], None), ("rd_kafka_queue_destroy", [vp], None),
                                        ("rd_kafka_version", [], ctypes.c_int),
                                        ("rd_kafka_conf", [vp], vp),
                                        ("rd_kafka_conf_set", [vp, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                                               ctypes.c_size_t], ctypes.c_int),
                                        ("rd_kafka_conf_get", [vp, ctypes.c_char_p, ctypes.c_char_p,
                                                               ctypes.POINTER(ctypes.c_size_t)], ctypes.c_int)):
                    fn = getattr(lib, name)
                    fn.argtypes, fn.restype = args, res
            except (OSError, AttributeError):
                continue
            if lib.rd_kafka_version() != confluent_kafka.libversion()[1]:
                continue   # not the copy confluent-kafka runs on
            _lib = lib
            return lib
        _lib_failed = True
        return None


def _supported() -> bool:
    return (sys.implementation.name == "cpython" and not sysconfig.get_config_var("Py_GIL_DISABLED")
            and confluent_kafka.version()[0].split(".")[0] in ("1", "2"))


def consumer_handle(consumer: confluent_kafka.Consumer) -> tuple[ctypes.CDLL, int] | None:
    """The librdkafka confluent-kafka runs on and `consumer`'s `rd_kafka_t *`, when librdkafka confirms the pointer
    is a consumer's handle (the module docstring); None otherwise. Call on the consumer's own thread, while it is
    open (kafka/fetch_wait.py uses it too)."""
    lib = _librdkafka() if _supported() else None
    if lib is None:
        return None
    try:
        rk = ctypes.c_void_p.from_address(id(consumer) + object.__basicsize__).value
        if not rk:
            return None
        name = lib.rd_kafka_name(rk) or b""
        if b"#consumer-" not in name or lib.rd_kafka_type(rk) != _RD_KAFKA_CONSUMER:
            log.debug("consumer handle not reached: the handle is not where it was expected")
            return None
    except (OSError, ValueError, ctypes.ArgumentError) as exc:
        log.debug("consumer handle not reached: %s", exc)
        return None
    return lib, rk


class ConsumerWake:
    """wake(): the consumer's `consume()` returns now (any thread). close() before the consumer closes."""

    def __init__(self, lib: ctypes.CDLL | None = None, queue: int | None = None):
        self._lib, self._queue = lib, queue
        self._lock = threading.Lock()

    @classmethod
    def of(cls, consumer: confluent_kafka.Consumer) -> ConsumerWake:
        """A wake for `consumer` (made on its poll thread, after it was created); one that does nothing when the
        handle cannot be reached safely (the module docstring)."""
        found = consumer_handle(consumer)
        if found is None:
            return cls()
        lib, rk = found
        try:
            queue = lib.rd_kafka_queue_get_consumer(rk)
        except (OSError, ValueError, ctypes.ArgumentError) as exc:
            log.debug("consumer wake-up not available: %s", exc)
            return cls()
        return cls(lib, queue) if queue else cls()

    @property
    def active(self) -> bool:
        return self._queue is not None

    def wake(self) -> None:
        with self._lock:
            if self._queue is not None and self._lib is not None:
                self._lib.rd_kafka_queue_yield(self._queue)

    def close(self) -> None:
        with self._lock:
            queue, self._queue = self._queue, None
            if queue is not None and self._lib is not None:
                self._lib.rd_kafka_queue_destroy(queue)
