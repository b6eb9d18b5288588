"""What every child process of a stream host shares: how it is spawned, how it leaves with its host, and
how its errors come back.

Children are spawned, not forked: the host has threads (uvicorn, librdkafka) that a fork would copy
mid-flight. A child never outlives its host: a thread watches the parent pid. An error crosses the pipe
as a value (ChildError) and is raised again in the host as the same StreamError class, its text redacted
of the stream's secrets when it is not one of ours. Used by stream processes (stream_process) and one-shot
calls (one_shot).
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from ...errors import StreamError, class_named
from ...redaction import redact

CHILD_POLL_S = 0.2   # how often a child looks at its host


@dataclass(frozen=True)
class ChildError:
    """An exception raised in a child, as it crosses the pipe."""
    kind: str       # a StreamError class name the host knows
    message: str

    def exception(self) -> StreamError:
        return class_named(self.kind)(self.message)


def child_error(exc: BaseException, secrets=()) -> ChildError:
    """A child's exception as a value: our errors keep their class and text; anything else (raised by the
    stream's own code, SystemExit too) is a TransformError with its type, redacted."""
    if isinstance(exc, StreamError):
        name = type(exc).__name__
        return ChildError(name if class_named(name) is type(exc) else "StreamError", str(exc))
    return ChildError("TransformError", redact(f"{type(exc).__name__}: {exc}", secrets))


def spawn_child(target: Callable, args: tuple, name: str, *, duplex: bool = True) -> tuple[BaseProcess, Connection]:
    """Start `target(conn, *args)` in a spawned child; (the process, the host's end of the pipe)."""
    context = multiprocessing.get_context("spawn")
    conn, child_end = context.Pipe(duplex=duplex)
    process = context.Process(target=target, args=(child_end, *args), daemon=True, name=name)
    process.start()
    child_end.close()
    return process, conn


def watch_host(on_gone: Callable[[], None]) -> None:
    """Call `on_gone` (on a thread of its own) once the process that spawned this one is gone."""
    host = os.getppid()

    def watch() -> None:
        while os.getppid() == host:
            threading.Event().wait(CHILD_POLL_S)
        on_gone()
    threading.Thread(target=watch, name="mgstreams-host-watch", daemon=True).start()


def exit_cause(exitcode: int | None) -> str:
    """`killed by signal 9 (SIGKILL)`, `exited with 3`: how a process ended, as an operator reads it."""
    if exitcode is None:
        return "ended (exit status unknown)"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "unknown signal"
        return f"killed by signal {-exitcode} ({name})"
    return f"exited with {exitcode}"
