"""Cyclic garbage is collected on a thread of our own (stream_registry/kafka/garbage.py), never on a librdkafka thread.

An admin client left in a reference cycle while its request is outstanding: the request ends on the client's
background thread, in Python code that allocates; were the collector to run there, it would free the client there,
and librdkafka aborts the process (a host died so during an outage). Each case runs in a child process of its own."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest
from paths import ROOT

from stream_registry.kafka import garbage

SCENARIO = textwrap.dedent("""
    import gc, sys, time, weakref
    from confluent_kafka.admin import AdminClient
    from stream_registry.kafka.garbage import collect_on_own_thread

    guarded = sys.argv[1] == "guarded"
    if guarded:
        collect_on_own_thread()
    gc.disable()
    class Marker:
        pass
    admin = AdminClient({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    outstanding = admin.describe_cluster(request_timeout=1)   # ends on the client's background thread, failed
    marker = Marker()
    cycle = [admin, marker]
    cycle.append(cycle)
    freed = weakref.ref(marker)
    del admin, marker, cycle
    gc.set_threshold(1)   # the collector is due at any allocation
    if not guarded:
        gc.enable()       # as Python runs by default
    deadline = time.monotonic() + 10
    while freed() is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.5)       # the request has ended by now
    print("freed" if freed() is None else "kept", flush=True)
""")


def _run(mode: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCENARIO, mode], capture_output=True, text=True, timeout=60,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_a_client_in_a_cycle_is_freed_on_our_thread_and_the_process_lives():
    done = _run("guarded")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "freed", "the cycle was collected, on the collector's own thread"


def test_without_it_the_collector_frees_the_client_on_librdkafkas_thread_and_librdkafka_aborts():
    """What the guard prevents, shown on this very scenario (it reaches the hazard)."""
    done = _run("plain")
    assert done.returncode == -signal.SIGABRT, (done.returncode, done.stdout, done.stderr[-2000:])
    assert "librdkafka owned thread is prohibited" in done.stderr


@pytest.mark.parametrize("counts, due, full_due", [
    ((700, 0, 0), None, None), ((701, 0, 0), 0, 0), ((701, 11, 0), 1, 1), ((701, 11, 11), 2, 1),
    ((701, 3, 11), 2, 0), ((5, 11, 11), None, None)])
def test_a_generation_is_due_as_the_interpreter_would_collect_it(monkeypatch, counts, due, full_due):
    """The oldest only when a full collection is allowed (at most every FULL_EVERY_S), else the next one due."""
    monkeypatch.setattr(garbage.gc, "get_threshold", lambda: (700, 10, 10))
    monkeypatch.setattr(garbage.gc, "get_count", lambda: counts)
    assert garbage.generation_due() == due
    assert garbage.generation_due(full_allowed=False) == full_due
