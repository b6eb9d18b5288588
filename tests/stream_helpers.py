"""Helpers for stream integration tests: a recording transformation, a recording sink, waits."""
from __future__ import annotations

import os
import re
import threading
import time
from collections import defaultdict
from pathlib import Path

from broker_support import FAST_REJOIN  # noqa: F401  (session timing per broker: see there)

RECORD_QUERY = "CREATE (:Msg {topic: $topic, partition: $partition, offset: $offset})"
_LINE = re.compile(r"""topic: ["'](?P<topic>[^"']+)["'], partition: (?P<partition>\d+), offset: (?P<offset>\d+)""")

# Set by tests: the transformation raises on a payload in FAIL_PAYLOADS while FAILING is set.
FAILING = threading.Event()
FAIL_PAYLOADS: set[bytes] = set()
SLOW_S = {"per_batch": 0.0}


def offsets_transform(messages):
    """One statement per message recording where it came from (not idempotent on purpose)."""
    if SLOW_S["per_batch"]:
        time.sleep(SLOW_S["per_batch"])
    out = []
    for i in range(messages.total_messages()):
        m = messages.message_at(i)
        if FAILING.is_set() and m.payload() in FAIL_PAYLOADS:
            raise ValueError(f"poisoned payload {m.payload()!r}")
        out.append({"query": RECORD_QUERY,
                    "parameters": {"topic": m.topic_name(), "partition": m.partition(), "offset": m.offset()}})
    return out


def poison_transform(messages):
    """offsets_transform, but a payload starting with `poison` raises ValueError: a message the
    transformation cannot read (a process-wide rule, so it holds in a stream's own process too)."""
    for i in range(messages.total_messages()):
        payload = messages.message_at(i).payload() or b""
        if payload.startswith(b"poison"):
            raise ValueError(f"cannot read {payload[:20]!r}")
    return offsets_transform(messages)


def crashing_transform(messages):
    """offsets_transform, but a payload `abort:<marker file>` makes the process abort (SIGABRT), as a C
    extension failing an assertion does: once if the marker does not exist yet (it is created first), or every
    time for `abort:always`. A payload `sleep:<seconds>` sleeps that long (a write that does not return)."""
    import os

    for i in range(messages.total_messages()):
        payload = messages.message_at(i).payload() or b""
        if payload.startswith(b"abort:"):
            marker = payload[len(b"abort:"):].decode()
            if marker == "always" or not os.path.exists(marker):
                if marker != "always":
                    Path(marker).touch()
                os.abort()
        elif payload.startswith(b"sleep:"):
            time.sleep(float(payload[len(b"sleep:"):]))
    return offsets_transform(messages)


def delivered_from_file(path: str | Path) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) of every statement in a cypherl file, in file order."""
    path = Path(path)
    if not path.exists():
        return []
    return [(m["topic"], int(m["partition"]), int(m["offset"]))
            for m in (_LINE.search(line) for line in path.read_text().splitlines()) if m]


class RecordingSink:
    """An in-memory sink: keeps every batch; can be told to fail the next N writes."""

    def __init__(self):
        self.batches: list[list] = []
        self.fail_next = 0
        self.lock = threading.Lock()

    def write(self, statements):
        with self.lock:
            if self.fail_next:
                self.fail_next -= 1
                raise OSError("injected sink failure")
            self.batches.append(list(statements))

    def close(self):
        pass

    def delivered(self) -> list[tuple[str, int, int]]:
        with self.lock:
            return [(s.parameters["topic"], s.parameters["partition"], s.parameters["offset"])
                    for batch in self.batches for s in batch]


class RejectingSink(RecordingSink):
    """Rejects, as a whole, any batch holding a statement for an offset in `reject`, with the error Memgraph
    gives a unique constraint violation at commit (Memgraph's "Constraints" documentation: "Unable to commit due
    to unique constraint violation on :Label(key)", an mgclient.DatabaseError): the batch's transaction fails."""

    def __init__(self, reject: set[tuple[str, int, int]]):
        super().__init__()
        self.reject = reject
        self.rejected = 0

    def write(self, statements):
        for s in statements:
            p = s.parameters
            if (p.get("topic"), p.get("partition"), p.get("offset")) in self.reject:
                self.rejected += 1
                raise RuntimeError("Unable to commit due to unique constraint violation on :Msg(offset)")
        super().write(statements)


def by_partition(delivered) -> dict[tuple[str, int], list[int]]:
    out = defaultdict(list)
    for topic, partition, offset in delivered:
        out[(topic, partition)].append(offset)
    return dict(out)


def wait_until(condition, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
