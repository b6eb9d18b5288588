"""bench/offset_latency.py --trace: the stamps of one call's hops lined up per call, as a table.

The bench's own process stamps the query module's HTTP request (http.client, patched here); the host and its
stream processes stamp theirs (bench/trace_hooks/sitecustomize.py), all on CLOCK_MONOTONIC, one clock for every
process of the machine.
"""
from __future__ import annotations

import collections
import http.client
import os
import statistics
import time
from pathlib import Path

# hops that repeat within a call, shown at their last time (the waiting call is checked once it starts waiting,
# and again once its outcome is written): the others at their first
LAST_HOPS = frozenset({"host: waiting call checked", "host: answer read", "host: waiters woken",
                       "stream: the last moved partition's first record consumed"})


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Trace:
    """Stamps of the hops (bench/trace_hooks in the host's processes; http.client here), lined up per call."""

    def __init__(self, path: Path):
        self.path = path
        self.calls: list[tuple[int, int, int]] = []   # (started, returned, first record at target) ns
        self.tasks_calls: list[tuple[int, int, int]] = []   # the same, on the tasks: 2 stream
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        for method, enter, leave in (("connect", "query module: connect", "query module: connected"),
                                     ("request", "query module: HTTP request sent", None),
                                     ("getresponse", None, "query module: HTTP reply read")):
            setattr(http.client.HTTPConnection, method,
                    self._stamping(getattr(http.client.HTTPConnection, method), enter, leave))

    def _stamping(self, method, enter: str | None, leave: str | None):
        def stamped(*args, **kwargs):
            if enter:
                self.stamp(enter)
            try:
                return method(*args, **kwargs)
            finally:
                if leave:
                    self.stamp(leave)
        return stamped

    def stamp(self, label: str) -> None:
        os.write(self._fd, f"{label}\t{time.monotonic_ns()}\t{os.getpid()}\n".encode())

    def env(self) -> dict[str, str]:
        return {"MGSTREAMS_BENCH_TRACE": str(self.path)}

    def table(self, calls: list[tuple[int, int, int]] | None = None) -> str:
        calls = self.calls if calls is None else calls
        stamps = []
        for line in self.path.read_text().splitlines():
            label, at, _ = line.split("\t")
            stamps.append((int(at), label))
        stamps.sort()
        since: dict[str, list[float]] = collections.defaultdict(list)
        order: dict[str, float] = {}
        for started, returned, arrived in calls:
            seen = {"call returned": returned, "first record at the target on every partition": arrived}
            for at, label in stamps:
                if started <= at <= max(returned, arrived) and (label not in seen or label in LAST_HOPS):
                    seen[label] = at
            for label, at in seen.items():
                since[label].append((at - started) / 1e6)
        for label, values in since.items():
            order[label] = statistics.median(values)
        lines = [f"{'hop (first time in each call; checks: last)':<56} {'since call ms':>13} {'since previous':>15} "
                 f"{'p95 since call':>15} {'calls':>6}"]
        previous = 0.0
        for label in sorted(order, key=order.get):
            lines.append(f"{label:<56} {order[label]:13.2f} {order[label] - previous:15.2f} "
                         f"{pct(since[label], 0.95):15.2f} {len(since[label]):>6}")
            previous = order[label]
        skipped = sorted({label for _, label in stamps if label.startswith("(not traced")})
        return "\n".join(lines + skipped)
