"""A process's CPU seconds, and those of its librdkafka threads (where a stream's fetching, decompressing and
parsing run: a partition fetched twice shows there)."""
from __future__ import annotations

import psutil


def cpu_of(pid: int | None) -> float | None:
    try:
        times = psutil.Process(pid).cpu_times()
        return times.user + times.system
    except (psutil.Error, TypeError, ValueError):
        return None


def thread_cpu_of(pid: int | None) -> tuple[float, float] | None:
    """(CPU seconds of the process's librdkafka threads (named rdk:*; the names from Linux /proc), of its busiest
    other thread: a stream's poll thread, which holds the GIL for everything Python does per message), None where
    not readable."""
    rdkafka, busiest = 0.0, 0.0
    try:
        for thread in psutil.Process(pid).threads():
            used = thread.user_time + thread.system_time
            with open(f"/proc/{pid}/task/{thread.id}/comm") as comm:
                if comm.read().startswith("rdk:"):
                    rdkafka += used
                else:
                    busiest = max(busiest, used)
    except (psutil.Error, OSError, TypeError, ValueError):
        return None
    return rdkafka, busiest
