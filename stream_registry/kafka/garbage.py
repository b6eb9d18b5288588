"""Python's cyclic garbage collected on a thread of our own, never on one of librdkafka's.

librdkafka runs Python code on its own threads: an admin client completes its futures on its background thread
(the results, the errors of a cluster that does not answer), and callbacks run there. Any allocation in that code
may start the cyclic collector, which frees every unreachable cycle it finds; a Kafka client in one is destroyed
right there, and librdkafka aborts the process when a client is destroyed from its own thread (rdkafka.c,
rd_kafka_destroy_app: "calling rd_kafka_destroy() from librdkafka owned thread is prohibited"). A host died so
during a cluster outage (tests/host/test_quiet_outage.py, once; reproduced in tests/unit/test_garbage.py).

So the processes mgstreams owns (the host, its stream processes, the CLI's) turn the automatic collector off and
run it here, every TICK_S, on the interpreter's own thresholds: the youngest generation once as many objects were
allocated as would have triggered it, an older one once the younger was collected as often, the oldest at most every
FULL_EVERY_S. Reference counting frees everything else where it was, as before. An application that embeds a
StreamRegistry in a process of its own can call `collect_on_own_thread()` too.
"""
from __future__ import annotations

import gc
import threading
import time

TICK_S = 0.05   # cyclic garbage waits at most about this long (the collector, automatic, ran at once)
# The oldest generation at most this often: a full collection walks every object (12.6 ms in a host), and the
# interpreter's own rule for it (the long-lived objects pending against those there) is not readable from Python.
FULL_EVERY_S = 10.0
_OLDEST = len(gc.get_threshold()) - 1   # the interpreter's generations: 0, 1, 2

_lock = threading.Lock()
_thread: threading.Thread | None = None


def collect_on_own_thread() -> None:
    """Turn the automatic collector off and collect on a daemon thread of this process (once per process)."""
    global _thread
    with _lock:
        if _thread is not None and _thread.is_alive():
            return
        gc.disable()
        _thread = threading.Thread(target=_collect, name="mgstreams-gc", daemon=True)
        _thread.start()


def generation_due(full_allowed: bool = True) -> int | None:
    """The generation the automatic collector would collect now, None when none is due (gc.get_count against
    gc.get_threshold, as CPython's collect_generations decides); the oldest only when `full_allowed`."""
    counts, thresholds = gc.get_count(), gc.get_threshold()
    if thresholds[0] == 0 or counts[0] <= thresholds[0]:
        return None
    return max(i for i in range(len(counts))
               if i == 0 or (counts[i] > thresholds[i] and (i < _OLDEST or full_allowed)))


def _collect() -> None:
    last_full = time.monotonic()
    while True:
        time.sleep(TICK_S)
        generation = generation_due(full_allowed=time.monotonic() - last_full >= FULL_EVERY_S)
        if generation is not None:
            gc.collect(generation)
            if generation == _OLDEST:
                last_full = time.monotonic()
