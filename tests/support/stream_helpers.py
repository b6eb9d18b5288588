"""Helpers for stream integration tests: a recording transformation, a recording sink, waits."""
from __future__ import annotations

import os
import re
import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

from broker_support import FAST_REJOIN  # noqa: F401  (session timing per broker: see there)

RECORD_QUERY = "CREATE (:Msg {topic: $topic, partition: $partition, offset: $offset})"
_LINE = re.compile(r"""topic: ["'](?P<topic>[^"']+)["'], partition: (?P<partition>\d+), offset: (?P<offset>\d+)""")

# Set by tests: the transformation raises on a payload in FAIL_PAYLOADS while FAILING is set.
FAILING = threading.Event()
FAIL_PAYLOADS: set[bytes] = set()
SLOW_S = {"per_batch": 0.0}
# The set_stream_offset timeout for a test that asserts a move is applied and is not about the timeout: the
# default 10 s is a user's wait on a quiet cluster; on a loaded CI machine a move once took longer, and the call
# answered "pending" (correctly). The call still returns as soon as the move is applied.
SETTLED_MS = 60_000


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


def held_offsets_transform(messages):
    """offsets_transform, held while the file named by $MGSTREAMS_TEST_HOLD exists (it touches `<file>.seen`
    first), in any process: a backfill a test overtakes at a moment of its choosing."""
    hold = os.environ.get("MGSTREAMS_TEST_HOLD")
    if hold:
        Path(hold + ".seen").touch()
        while os.path.exists(hold):
            time.sleep(0.02)
    return offsets_transform(messages)


def poison_transform(messages):
    """offsets_transform, but a payload starting with `poison` raises ValueError: a message the
    transformation cannot read (a process-wide rule, so it holds in a stream's own process too)."""
    for i in range(messages.total_messages()):
        payload = messages.message_at(i).payload() or b""
        if payload.startswith(b"poison"):
            raise ValueError(f"cannot read {payload[:20]!r}")
    return offsets_transform(messages)


def websocket_transform(messages):
    """JSON events keyed by `socket_id`, as a websocket gateway sends them: a payload in Confluent's wire format
    (magic byte 0) raises confluent-kafka's SerializationError, as its deserializers do for a payload they did not
    write; an event without `socket_id` raises KeyError. Both the message's fault, whatever words they hold."""
    import json

    from confluent_kafka.serialization import SerializationError

    out = []
    for i in range(messages.total_messages()):
        m = messages.message_at(i)
        payload = m.payload() or b""
        if payload[:1] == b"\x00":
            raise SerializationError("Unknown magic byte. This message was not produced with a Confluent "
                                     "Schema Registry serializer")
        event = json.loads(payload)
        socket = event["socket_id"]
        out.append({"query": RECORD_QUERY, "parameters": {"topic": m.topic_name(), "partition": m.partition(),
                                                          "offset": m.offset(), "socket": socket}})
    return out


def crashing_transform(messages):
    """offsets_transform, but a payload `abort:<marker file>` makes the process abort (SIGABRT), as a C
    extension failing an assertion does: once if the marker does not exist yet (it is created first), or every
    time for `abort:always`. A payload `sleep:<seconds>` sleeps that long (a write that does not return)."""

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


_HOARD: list[bytearray] = []


def hoard_memory(messages):
    """Keeps allocating (20 MiB every 50 ms, touched so that it is resident), as a leaking transformation
    does; stops at 1 GiB so that a process nobody stops cannot take the machine."""
    while len(_HOARD) < 50:
        _HOARD.append(bytearray(b"\x01") * (20 * 2**20))
        time.sleep(0.05)
    return offsets_transform(messages)


def forging_transform(messages):
    """Raises an error whose text holds a newline and a forged log line (the message's fault)."""
    raise ValueError("cannot read\n2026-01-01 00:00:00,000 WARNING mgstreams.host: token rotated; use the new one")


def statement_lines(path: str | Path) -> list[str]:
    """A cypherl file's statements, one a line: its batches' frame lines (`// mgstreams-batch …`, comments
    to mgconsole and Memgraph) left out."""
    return [line for line in Path(path).read_text().splitlines() if not line.startswith("//")]


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


@contextmanager
def bolt_exactly_once_stream(kafka, tmp_path, monkeypatch, memgraph, batch_size: int, attempts: int):
    """(registry, topic): an exactly-once stream `orders` writing offsets_transform's CREATEs over Bolt to
    `memgraph` (the pymgclient stand-in), once it stored the topic's first 10 messages."""
    import uuid

    from stream_registry import StreamConfig, StreamRegistry
    from stream_registry.graph import sinks
    from stream_registry.model import RetryPolicy

    monkeypatch.setattr(sinks.bolt, "connect_driver", memgraph.connect)
    monkeypatch.setenv("MGSTREAMS_ALLOWED_HOSTS", "memgraph,localhost,127.0.0.0/8")   # the sink host, by name
    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 10, partitions=1)
    registry = StreamRegistry(tmp_path / "state", retry=RetryPolicy(attempts=attempts, first_backoff_s=0.05))
    try:
        registry.create(StreamConfig("orders", [topic], kafka.bootstrap_servers, "stream_helpers.offsets_transform",
                                     "bolt://memgraph:7687", consumer_group=f"eos_{uuid.uuid4().hex[:8]}",
                                     batch_size=batch_size, batch_interval_ms=20, configs=FAST_REJOIN,
                                     delivery="exactly_once"))
        registry.start("orders")
        wait_until(lambda: memgraph.offsets.get(("orders", topic, 0)) == 10, 30, what="10 messages stored")
        yield registry, topic
    finally:
        registry.close()


def by_partition(delivered) -> dict[tuple[str, int], list[int]]:
    out = defaultdict(list)
    for topic, partition, offset in delivered:
        out[(topic, partition)].append(offset)
    return dict(out)


def wait_until(condition, timeout: float = 30.0, interval: float = 0.05, what: str = "condition", describe=None):
    """`condition()`'s first truthy value; on a timeout, the error says what was awaited and, given `describe`,
    what `describe()` shows then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    seen = f"; last seen: {describe()}" if describe else ""
    raise AssertionError(f"timed out after {timeout} s waiting for {what}{seen}")


def sleeping_transform(messages):
    """offsets_transform, but a payload `sleep:S` makes the batch take S seconds first (a long batch in flight,
    in a stream's own process too)."""
    for i in range(messages.total_messages()):
        payload = messages.message_at(i).payload() or b""
        if payload.startswith(b"sleep:"):
            time.sleep(float(payload[len(b"sleep:"):]))
    return offsets_transform(messages)
