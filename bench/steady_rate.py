"""A run's steady rate from its looks at each stream's committed offsets: bench/multi_stream.py's figure."""
from __future__ import annotations


def steady_rate(looks: list[tuple[float, list[int]]], count: int) -> float | None:
    """A run's aggregate rate while all its streams ran, start-up excluded, each stream timed between its own
    commits. `looks`: (seconds, committed per stream), in order, multi_stream.POLL_S apart.

    A stream commits a backlog's offsets every commit.interval.ms (500 ms by default: group_commits.py), so its
    committed offset is up to that far behind what it read at any look in between: a window whose ends are looks
    counts up to 500 ms of reading at one end and not at the other. So each stream's rate is taken between two
    looks at which its committed offset had just moved (a commit instant, seen within POLL_S): the first at or
    after the window's start, the last at or before its end. The window: from the look at which the last stream
    had first committed (its process spawned, its group joined, its first fetch and transformation done) to the
    look at which the first stream had committed its whole topic (after it, fewer streams run). The run's rate is
    the sum of its streams' rates. None when a stream has no two commit instants in that window."""
    if not looks:
        return None
    width = len(looks[0][1])
    moved: list[list[tuple[float, int]]] = [[] for _ in range(width)]   # per stream: (seconds, committed) at each move
    before = [0] * width
    for t, done in looks:
        for i, value in enumerate(done):
            if value != before[i]:
                moved[i].append((t, value))
                before[i] = value
    if any(not points for points in moved):
        return None
    start = max(points[0][0] for points in moved)
    finished = [next((t for t, value in points if value >= count), points[-1][0]) for points in moved]
    end = min(finished)
    total = 0.0
    for points in moved:
        inside = [(t, value) for t, value in points if start <= t <= end]
        if len(inside) < 2:
            return None
        (t0, v0), (t1, v1) = inside[0], inside[-1]
        total += (v1 - v0) / (t1 - t0)
    return total
