"""The chaos soak's transformation (bench/soak/, `python -m bench.soak`): one recording statement per message.

Each statement says where its message came from and which batch carried it:

    CREATE (:SoakMsg {topic: "soak_a", partition: 0, offset: 5, seq: 17, batch: "4242-9"});

`seq` is the producer's sequence number read from the payload (the checker
compares it with what the producer was told it wrote at that offset); `batch`
is `<host pid>-<call number>`, unique per transformation call, so the checker
sees batch boundaries in the sink file (commit points are batch ends).

Faults on demand, per topic: the soak writes `$SOAK_CONTROL_DIR/<topic>.fail`
holding `transform N` or `sink N`; the next N calls for that topic then raise
(transform) or return a batch the sink refuses as a whole (a statement
naming a parameter it is not given: the cypherl sink raises SinkError before
writing anything; the Bolt stand-in of the tasks stream refuses it by its
marker, failing the transaction). Each injected failure is appended to `<topic>.fired`. N is kept
below the host's retry attempts, so the stream retries the same batch from
memory and goes on: a transient failure, never a skipped batch. `kill 1`: the
stream process kills itself (SIGKILL) as soon as the batch's append reaches its
sink file, `$SOAK_SINK_DIR/<topic>.cypherl` (or the path `<topic>.sink` in the control directory names, after
a sink change), before the Kafka commit (a commit
whose outcome the stream never learns; often in the middle of the append). For
the tasks stream that path is the Bolt stand-in's journal, which every task
appends to: the process dies once a line of its own pid lands there (its
transaction committed).

One stream (one poll thread) per topic reads its control file, so the read,
decrement and rewrite need no lock.

A topic named in `$SOAK_GRAPH_TOPICS` (the tasks stream's, written to a real
FalkorDB server, which has no transactions) gets an idempotent statement
instead (GRAPH_QUERY): one node per message, MERGEd on (topic, partition,
offset), whose `batches` list gains the batch's tag unless it holds it. Applying
a statement again changes nothing (the sink's retry of a batch cut short, the
stated limit of exactly-once on FalkorDB); a delivery by another batch (a
re-delivery) adds its tag, so the graph keeps every delivery in order. The tag
there is `<pid>-<call>-<wall clock ns>`: the oracle orders deliveries by that
clock (a graph has no file order). A refused batch's failing statement goes
first there, so the refusal leaves nothing (FalkorDB applies the statements
before a failing one).
"""
from __future__ import annotations

import itertools
import os
import signal
import threading
import time

CONTROL_ENV = "SOAK_CONTROL_DIR"
GRAPH_TOPICS_ENV = "SOAK_GRAPH_TOPICS"   # comma-separated: topics whose stream writes to the graph server
SINK_DIR_ENV = "SOAK_SINK_DIR"
KILL_WATCH_S = 10.0   # a batch that never reaches the file (it failed) does not kill anything
QUERY = "CREATE (:SoakMsg {topic: $topic, partition: $partition, offset: $offset, seq: $seq, batch: $batch})"
GRAPH_QUERY = ("MERGE (m:SoakMsg {topic: $topic, partition: $partition, offset: $offset}) SET m.seq = $seq, "
               "m.batches = CASE WHEN m.batches IS NULL THEN [$batch] WHEN $batch IN m.batches THEN m.batches "
               "ELSE m.batches + [$batch] END")
REFUSAL_MARKER = "soak-refused-by-sink"     # the Bolt stand-in refuses a statement holding it (MGCLIENT_STANDIN_REJECT)
# a cypherl sink refuses it for the parameter it is not given, the Bolt stand-in for the marker (as Memgraph
# refuses a statement naming a parameter it is not given)
REFUSED_BY_SINK = {"query": "CREATE (:SoakFault {why: $not_given})", "parameters": {"marker": REFUSAL_MARKER}}

_calls = itertools.count(1)


def record(messages):
    """Memgraph-style transformation: messages -> [{"query", "parameters"}]."""
    count = messages.total_messages()
    if not count:
        return []
    topic = messages.message_at(0).topic_name()
    graph = topic in os.environ.get(GRAPH_TOPICS_ENV, "").split(",")
    batch = f"{os.getpid()}-{next(_calls)}" + (f"-{time.time_ns()}" if graph else "")
    injected = _take_fault(topic)
    if injected == "transform":
        raise RuntimeError("soak: injected transformation failure")
    if injected == "kill":
        _kill_after_append(topic)
    out = []
    for i in range(count):
        m = messages.message_at(i)
        out.append({"query": GRAPH_QUERY if graph else QUERY,
                    "parameters": {"topic": m.topic_name(), "partition": m.partition(), "offset": m.offset(),
                                   "seq": _seq(m.payload()), "batch": batch}})
    if injected == "sink":
        if graph:
            out.insert(0, REFUSED_BY_SINK)
        else:
            out.append(REFUSED_BY_SINK)
    return out


def _seq(payload: bytes) -> int:
    """Payloads are b"seq=<n>;..." (bench/soak/producer.py); -1 for anything else."""
    head = payload[:32].split(b";", 1)[0]
    return int(head[4:]) if head.startswith(b"seq=") and head[4:].isdigit() else -1


def _take_fault(topic: str) -> str | None:
    directory = os.environ.get(CONTROL_ENV)
    if not directory:
        return None
    path = os.path.join(directory, f"{topic}.fail")
    try:
        with open(path) as handle:
            kind, _, left = handle.read().partition(" ")
    except OSError:
        return None
    try:
        left_n = int(left)
    except ValueError:
        left_n = 0
    if left_n <= 1:
        _remove(path)
    else:
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as handle:
            handle.write(f"{kind} {left_n - 1}")
        os.replace(tmp, path)
    if left_n <= 0 or kind not in ("transform", "sink", "kill"):
        return None
    with open(os.path.join(directory, f"{topic}.fired"), "a") as handle:
        handle.write(kind + "\n")
    return kind


def _kill_after_append(topic: str) -> None:
    """SIGKILL this process as soon as its sink file grows (the batch being returned is appended)."""
    path = os.path.join(os.environ.get(SINK_DIR_ENV, ""), f"{topic}.cypherl")
    try:     # the soak moved the stream to another sink file (a sink change): it names it here
        with open(os.path.join(os.environ.get(CONTROL_ENV, ""), f"{topic}.sink")) as handle:
            path = handle.read().strip() or path
    except OSError:
        pass
    try:
        size = os.stat(path).st_size
    except OSError:
        size = 0
    mine = f'{{"pid": {os.getpid()},'.encode() if path.endswith(".jsonl") else None   # a journal line's start

    def watch() -> None:
        nonlocal size
        deadline = time.monotonic() + KILL_WATCH_S
        while time.monotonic() < deadline:
            try:
                now = os.stat(path).st_size
                # grown: an append (of this process, in the journal); shrunk: a file cut (or a torn journal line
                # cut off), no append: the watch goes on from there
                if now > size and (mine is None or _appended_holds(path, size, mine)):
                    os.kill(os.getpid(), signal.SIGKILL)
                size = now
            except OSError:
                pass
            time.sleep(0.0001)

    threading.Thread(target=watch, daemon=True, name="soak-kill").start()


def _appended_holds(path: str, since: int, text: bytes) -> bool:
    """Whether what was appended to `path` past byte `since` holds `text`."""
    with open(path, "rb") as handle:
        handle.seek(since)
        return text in handle.read()


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
