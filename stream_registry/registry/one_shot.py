"""One call of a stream's own code in a short-lived child process of its own.

A stream host runs no user code in its own process: a transformation that
segfaults in a C extension, calls `os.abort()` or exits must end one call, not
the host and every stream with it. Streams run in their stream processes
(stream_process); the other places that run a transformation (importing it to
check it at create, a preview) go through `call_in_child`, spawned like a
stream's process and tied to its host the same way.
"""
from __future__ import annotations

import multiprocessing
import os
import threading
from typing import Any, Callable

from ..errors import (ConfigError, KafkaOperationError, OffsetSpecError, SinkError, StreamError,
                      TransformError)
from ..redaction import redact
from .stream_process import CHILD_POLL_S, exit_cause

SPAWN_GRACE_S = 15.0   # beyond the call's own timeout: starting the interpreter and importing the transformation
_ERRORS = {cls.__name__: cls for cls in (StreamError, ConfigError, OffsetSpecError, TransformError,
                                         KafkaOperationError, SinkError)}


def call_in_child(fn: Callable[..., Any], *args: Any, timeout: float, what: str, secrets=()) -> Any:
    """`fn(*args)` in a spawned child (fn and args picklable: a module-level function, plain values).
    Its StreamErrors come back as the same classes; a child that dies (a signal, an exit) or does not answer
    within `timeout` is a TransformError naming `what` and how it ended."""
    context = multiprocessing.get_context("spawn")
    conn, child_end = context.Pipe(duplex=False)
    process = context.Process(target=_child_main, args=(child_end, fn, args, tuple(secrets)), daemon=True,
                              name=f"mgstreams-{fn.__name__}")
    process.start()
    child_end.close()
    try:
        if not conn.poll(timeout + SPAWN_GRACE_S):
            raise TransformError(f"{what}: did not finish within {timeout:g} s and its process was killed")
        answer = conn.recv()
    except (EOFError, OSError):
        process.join(5.0)
        raise TransformError(f"{what}: its process {exit_cause(process.exitcode)}; nothing was changed") from None
    finally:
        if process.is_alive():
            process.kill()
        process.join(5.0)
        conn.close()
    if answer[0] == "ok":
        return answer[1]
    raise _ERRORS.get(answer[1], StreamError)(answer[2])


def _child_main(conn, fn, args, secrets) -> None:
    _leave_with(os.getppid())
    try:
        answer = ("ok", fn(*args))
    except StreamError as exc:
        name = type(exc).__name__
        answer = ("error", name if name in _ERRORS else "StreamError", str(exc))
    except BaseException as exc:  # anything else the stream's code raised (SystemExit too)
        answer = ("error", "TransformError", redact(f"{type(exc).__name__}: {exc}", secrets))
    conn.send(answer)
    conn.close()


def _leave_with(host: int) -> None:
    """A child never outlives the process that asked for it."""
    def watch() -> None:
        while os.getppid() == host:
            threading.Event().wait(CHILD_POLL_S)
        os._exit(1)
    threading.Thread(target=watch, name="mgstreams-host-watch", daemon=True).start()
