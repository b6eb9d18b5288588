"""bench/offset_latency.py --trace: time stamps at the hops of an offset change, in the host and its stream
processes (this directory is put first on their PYTHONPATH, so Python imports this file at start-up).

With MGSTREAMS_BENCH_TRACE set to a file, the methods below are wrapped (the classes patched, in this process
only) to append `label<TAB>time.monotonic_ns()` at their entry or exit; CLOCK_MONOTONIC is one clock for every
process of the machine, so the bench lines the stamps of its processes up. The product's code is not changed.
The next sitecustomize on the path (the Bolt stand-in's) still runs: this one would shadow it.
"""
import functools
import importlib
import importlib.util
import os
import sys
import time

_PATH = os.environ.get("MGSTREAMS_BENCH_TRACE")

# (module, class, method, label at entry or None, label at exit or None)
HOPS = (
    ("stream_registry.registry.registry", "StreamRegistry", "request_offset", "host: handler calls the registry",
     "host: change handed off, the call waits"),
    ("stream_registry.registry.host.positions", "StreamPositions", "resolve", "host: resolve (asks the cluster)",
     "host: resolved"),
    ("stream_registry.kafka.queries", "PartitionQuery", "partitions", "host: metadata asked",
     "host: metadata answered"),
    ("stream_registry.kafka.queries", "PartitionQuery", "watermarks", "host: watermarks asked",
     "host: watermarks answered"),
    ("stream_registry.kafka.queries", "PartitionQuery", "committed", "host: committed offsets asked",
     "host: committed offsets answered"),
    ("stream_registry.registry.runners.stream_process", "ProcessRunner", "snapshot", "host: stream's positions asked",
     "host: stream's positions answered"),
    ("stream_registry.registry.state.change_sets", "ChangeSets", "open", "host: SQLite write of the change",
     "host: SQLite write done"),
    ("stream_registry.registry.runners.stream_process", "ProcessRunner", "call_coming",
     "host: call announced to the stream process (pipe)", None),
    ("stream_registry.registry.runners.stream_process", "ProcessRunner", "request_offsets",
     "host: hand-off to the stream process (pipe)", None),
    ("stream_registry.registry.stream.calls_coming", "CallsComing", "coming",
     "stream: a call is coming (heard)", None),
    ("stream_registry.registry.stream.worker", "StreamWorker", "request_offsets",
     "stream: change received, queued for the poll thread", None),
    ("stream_registry.registry.runners.stream_process", "ProcessRunner", "recorded",
     "host: record durable, the stream process told", None),
    ("stream_registry.registry.stream.worker", "StreamWorker", "recorded", "stream: told the record is durable",
     None),
    ("stream_registry.registry.stream.offset_gate", "OffsetGate", "request", "stream: poll thread woke, gate takes it",
     None),
    ("stream_registry.registry.stream.worker", "StreamWorker", "seek", "stream: seek", None),
    ("stream_registry.registry.stream.worker", "StreamWorker", "reassign", "stream: reassign", None),
    ("stream_registry.registry.stream.worker", "StreamWorker", "persist", "stream: commit of the change",
     "stream: committed"),
    ("stream_registry.registry.stream.worker", "StreamWorker", "_collect_batch", "stream: collecting a batch",
     None),
    ("stream_registry.registry.stream.batch_writer", "BatchWriter", "deliver",
     "stream: first batch after the move collected", None),
    ("stream_registry.graph.sinks.cypherl", "CypherlSink", "write", "stream: sink write (cypherl)",
     "stream: sink written (cypherl)"),
    ("stream_registry.registry.stream.group_commits", "GroupCommits", "commit_batch", "stream: batch commit",
     "stream: batch commit handed over"),
    ("stream_registry.registry.stream.batch_writer", "BatchWriter", "process", None, "stream: a batch processed"),
    ("stream_registry.registry.stream.batch_writer", "BatchWriter", "deliver", None, "stream: a batch delivered"),
    ("stream_registry.registry.runners.stream_process", "_EventRelay", "__call__", "stream: event to the host", None),
    ("stream_registry.registry.runners.stream_process", "ProcessRunner", "_on_offset_events",
     "host: event received", None),
    ("stream_registry.registry.state.state_store", "StateStore", "record_applied", "host: SQLite write of the outcome",
     "host: outcome written"),
    ("mgstreams.host.waits", "Waits", "_wake", "host: waiters woken", None),
    ("mgstreams.host.waits", "Waits", "_settled", "host: waiting call checked", "host: answer read"),
)


def _stamp(fd: int, label: str) -> None:
    os.write(fd, f"{label}\t{time.monotonic_ns()}\t{os.getpid()}\n".encode())


def _wrap(fd: int, method, enter, leave):
    @functools.wraps(method)
    def traced(*args, **kwargs):
        if enter:
            _stamp(fd, enter)
        try:
            return method(*args, **kwargs)
        finally:
            if leave:
                _stamp(fd, leave)
    return traced


def _install(path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    for module_name, class_name, method_name, enter, leave in HOPS:
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
            setattr(cls, method_name, _wrap(fd, getattr(cls, method_name), enter, leave))
        except (ImportError, AttributeError):   # moved or renamed: that hop is not traced
            _stamp(fd, f"(not traced: {module_name}.{class_name}.{method_name})")


def _install_deliveries(fd: int) -> None:
    """The first record of each moved partition consumed (a delivery the gate checks against its target): the
    first of them and the last (LAST_HOPS in the bench)."""
    try:
        from stream_registry.registry.stream.offset_gate import OffsetGate
    except ImportError:
        _stamp(fd, "(not traced: OffsetGate.check_delivery)")
        return
    method = OffsetGate.check_delivery

    @functools.wraps(method)
    def traced(self, tp, offset):
        part = self._assigned.get(tp)
        first = part is not None and part.expect is not None
        delivered = method(self, tp, offset)
        if first and delivered:
            _stamp(fd, "stream: a moved partition's first record consumed")
            _stamp(fd, "stream: the last moved partition's first record consumed")
        return delivered
    OffsetGate.check_delivery = traced


def _chain() -> None:
    """Run the next sitecustomize on the path too (this one shadows it: the Bolt stand-in's, say)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        candidate = os.path.join(os.path.abspath(entry or "."), "sitecustomize.py")
        if os.path.dirname(candidate) != here and os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_next_sitecustomize", candidate)
            if spec is not None and spec.loader is not None:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


_chain()
if _PATH:
    _install(_PATH)
    _install_deliveries(os.open(_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600))
