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


def rdkafka_cpu_of(pid: int | None) -> float | None:
    """CPU seconds of the process's librdkafka threads (named rdk:*; the names from Linux /proc), None where not
    readable."""
    total = 0.0
    try:
        for thread in psutil.Process(pid).threads():
            with open(f"/proc/{pid}/task/{thread.id}/comm") as comm:
                if comm.read().startswith("rdk:"):
                    total += thread.user_time + thread.system_time
    except (psutil.Error, OSError, TypeError, ValueError):
        return None
    return total
