"""A process's CPU seconds, and those of its librdkafka threads (where a stream's fetching, decompressing and
parsing run: a partition fetched twice shows there)."""
from __future__ import annotations

import os

import psutil


def cpu_of(pid: int | None) -> float | None:
    try:
        times = psutil.Process(pid).cpu_times()
        return times.user + times.system
    except (psutil.Error, TypeError, ValueError):
        return None


def rdkafka_cpu_of(pid: int | None) -> float | None:
    """CPU seconds of the process's librdkafka threads (named rdk:*; Linux /proc), None where not readable."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0.0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/comm") as comm, open(f"/proc/{pid}/task/{tid}/stat") as stat:
                if comm.read().startswith("rdk:"):
                    fields = stat.read().rsplit(")", 1)[1].split()   # after the name: state is field 0
                    total += (int(fields[11]) + int(fields[12])) / tick   # utime, stime
    except (OSError, IndexError, ValueError):
        return None
    return total
