"""Operator caps no caller can pass: streams defined, stream processes running, memory of one stream process.

Each refusal names its setting ($MGSTREAMS_MAX_STREAMS, $MGSTREAMS_MAX_RUNNING,
$MGSTREAMS_STREAM_MEMORY_MB). Running processes are counted per process (each
runner's pids), not per stream, so a stream of several processes counts for
each. The memory cap is kept by the stream process itself (`MemoryWatch`): over
it, the process reports its stream in `error` saying memory and leaves; the host
and the other streams carry on.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping

import psutil

from ...errors import ConfigError, StreamStateError
from ...model import MAX_RUNNING_ENV, MAX_STREAMS_ENV, STREAM_MEMORY_MB_ENV, StreamCaps

MEMORY_CHECK_S = 0.2
_FIELDS = {"max_streams": MAX_STREAMS_ENV, "max_running": MAX_RUNNING_ENV, "stream_memory_mb": STREAM_MEMORY_MB_ENV}


def caps_from_env(environ: Mapping[str, str] | None = None) -> StreamCaps:
    """The defaults, each replaced by its variable when set (a positive integer; ConfigError naming it else)."""
    environ = os.environ if environ is None else environ
    values = {}
    for field, name in _FIELDS.items():
        text = environ.get(name, "").strip()
        if text:
            if not text.isdigit() or int(text) < 1:
                raise ConfigError(f"{name}: expected a positive integer, got {text!r}")
            values[field] = int(text)
    return StreamCaps(**values)


def check_streams(defined: int, caps: StreamCaps) -> None:
    if defined >= caps.max_streams:
        raise StreamStateError(f"streams: {defined} streams are defined, the most this host keeps "
                               f"(${MAX_STREAMS_ENV} {caps.max_streams}); drop one first")


def runner_pids(runner: object) -> list[int]:
    """The processes a runner holds (engine.StreamRunner.pids); none spawned yet: one slot it is about to take."""
    pids = list(getattr(runner, "pids", None) or ())
    if pids:
        return pids
    pid = getattr(runner, "pid", None)
    return [-1] if pid is None else [pid]


def running_processes(runners: Iterable[object]) -> int:
    """Stream processes alive (or about to be spawned) among `runners`."""
    count = 0
    for runner in runners:
        for pid in runner_pids(runner):
            if pid == -1:
                count += 1
            elif pid != os.getpid() and _alive(pid):
                count += 1
    return count


def check_running(running: int, needed: int, caps: StreamCaps, name: str) -> None:
    if running + needed > caps.max_running:
        raise StreamStateError(f"running: stream {name!r} not started: {running} stream processes run, the most "
                               f"this host runs at once (${MAX_RUNNING_ENV} {caps.max_running}); stop one first")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _own_rss() -> int:
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class MemoryWatch:
    """A stream process's own watch on its resident memory: every MEMORY_CHECK_S, and once over `limit_mb`,
    `over(message)` once (the message names the setting)."""

    def __init__(self, limit_mb: int, over: Callable[[str], None], rss: Callable[[], int] = _own_rss):
        self.limit_mb, self._over, self._rss = limit_mb, over, rss
        self._stop = threading.Event()

    def start(self) -> MemoryWatch:
        threading.Thread(target=self._watch, name="mgstreams-memory", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        limit = self.limit_mb * 1024 * 1024
        while not self._stop.wait(MEMORY_CHECK_S):
            used = self._rss()
            if used > limit:
                self._over(f"memory: the stream process uses {used / 2**20:.0f} MiB, over the "
                           f"{self.limit_mb} MiB a stream process may use (${STREAM_MEMORY_MB_ENV}); stopped")
                return
