"""Asking one thing while another is asked: a call's second question on a thread kept for it.

An offset call asks the cluster and the stream's processes at once (registry/positions.py), and the group's
coordinator while the partition leaders answer (kafka/queries.py). A thread pool made per call cost about
0.35 ms each time (bench/offset_latency.py --trace): the threads here are made once and kept, idle ones reused.
"""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

T = TypeVar("T")
MAX_THREADS = 16   # questions in flight at once, all calls together; more wait for a free thread

_POOL = ThreadPoolExecutor(max_workers=MAX_THREADS, thread_name_prefix="mgstreams-meanwhile")


def meanwhile(fn: Callable[[], T]) -> Future[T]:
    """Start `fn()` on a kept thread; its result (or its exception) through the future.

    Only for a bounded question (every caller passes its own deadline): a task that waits for another task of
    this pool could wait behind it."""
    return _POOL.submit(fn)


def finished_with(asked: Future, fn: Callable[[], T]) -> T:
    """`fn()` in this thread while `asked` runs; when `fn` raises, `asked` is waited for first (no question
    outlives the call that asked it) and fn's error is the one raised."""
    try:
        return fn()
    except BaseException:
        wait([asked])
        raise
