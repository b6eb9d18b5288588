"""librdkafka's repeated log lines collapsed: the first of a kind per interval, then a count.

A client that cannot reach its brokers logs the same FAIL line for every
reconnect of every broker thread: one refused create against 127.0.0.1:1 wrote
194 identical "Connection refused" lines to the host's log. `RepeatCollapser`
is a logging.Filter for the librdkafka logger: a line whose shape (its text
with the thread tag and the millisecond counts taken out) was passed within
the last `interval` seconds is dropped and counted; the next one of that shape
after the interval passes with the count ("(and 57 more like it in 10 s)").

`collapse_all_repeats` applies it to every logger of a process (the host and
each stream process): on the root logger's handlers, which see every record
that reaches them, for warnings and errors (an outage made each stream write
`stream s: kafka: ... Connect to ipv4#... failed` 20 times a second); the
librdkafka logger's lines collapse at every level, as before. Informational
lines (a stream's lifecycle, its offset changes) are never collapsed.
"""
from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

INTERVAL_S = 10.0
MAX_SHAPES = 1000   # shapes remembered at most; the oldest are forgotten first
_THREAD = re.compile(r"\s*\[thrd:[^\]]*\]")
_MILLIS = re.compile(r"\d+ms\b")


def shape(message: str) -> str:
    """What makes two lines "the same": the text without its thread tag and its millisecond counts."""
    return _MILLIS.sub("Nms", _THREAD.sub("", message))


class RepeatCollapser(logging.Filter):
    def __init__(self, interval: float = INTERVAL_S, clock: Callable[[], float] = time.monotonic,
                 level: int = logging.NOTSET):
        super().__init__()
        self.interval = interval
        self.level = level   # lines below it always pass
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[tuple[int, str], list] = {}   # (level, shape): [when passed, dropped since]

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.level:
            return True
        key = (record.levelno, shape(record.getMessage()))
        now = self._clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen[0] < self.interval:
                seen[1] += 1
                return False
            dropped, since = (seen[1], now - seen[0]) if seen else (0, 0.0)
            self._seen.pop(key, None)
            self._seen[key] = [now, 0]
            while len(self._seen) > MAX_SHAPES:
                del self._seen[next(iter(self._seen))]
        if dropped:
            record.msg = f"{record.getMessage()} (and {dropped} more like it in the last {since:.0f} s)"
            record.args = ()
        return True


def collapse_repeats(logger_name: str = "mgstreams.librdkafka", interval: float = INTERVAL_S) -> None:
    """Install a RepeatCollapser on the named logger (once; calling again changes nothing)."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, RepeatCollapser) for f in logger.filters):
        logger.addFilter(RepeatCollapser(interval))


def collapse_all_repeats(interval: float = INTERVAL_S, level: int = logging.WARNING) -> None:
    """Every logger's repeated lines at `level` and above collapsed, on the root logger's handlers (configure
    logging first), and librdkafka's at every level; calling again changes nothing."""
    collapse_repeats(interval=interval)
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RepeatCollapser) for f in handler.filters):
            handler.addFilter(RepeatCollapser(interval, level=level))
