"""One call of a stream's own code in a short-lived child process of its own.

A stream host runs no user code in its own process: a transformation that
segfaults in a C extension, calls `os.abort()` or exits must end one call, not
the host and every stream with it. Streams run in their stream processes
(stream_process); the other places that run a transformation (importing it to
check it at create, a preview) go through `call_in_child`, spawned like a
stream's process and tied to its host the same way.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ...crash_stacks import print_stacks_on_crash
from ...errors import TransformError
from ...kafka.garbage import collect_on_own_thread
from ...sandbox import confine_stream, end_group
from .caps import caps_from_env
from .child_process import child_error, exit_cause, spawn_child, watch_host

SPAWN_GRACE_S = 15.0   # beyond the call's own timeout: starting the interpreter and importing the transformation


def call_in_child(fn: Callable[..., Any], *args: Any, timeout: float, what: str, secrets=()) -> Any:
    """`fn(*args)` in a spawned child (fn and args picklable: a module-level function, plain values).
    Its StreamErrors come back as the same classes; a child that dies (a signal, an exit) or does not answer
    within `timeout` is a TransformError naming `what` and how it ended."""
    process, conn = spawn_child(_child_main, (fn, args, tuple(secrets)), f"mgstreams-{fn.__name__}", duplex=False)
    try:
        if not conn.poll(timeout + SPAWN_GRACE_S):
            raise TransformError(f"{what}: did not finish within {timeout:g} s and its process was killed")
        ok, value = conn.recv()
    except (EOFError, OSError):
        process.join(5.0)
        raise TransformError(f"{what}: its process {exit_cause(process.exitcode)}; nothing was changed") from None
    finally:
        if process.is_alive():
            process.kill()
        end_group(process.pid, grace=5.0)
        process.join(5.0)
        conn.close()
    if ok:
        return value
    raise value.exception()


def _child_main(conn, fn, args, secrets) -> None:
    # a preview runs the stream's code: confined as a stream process is (it writes nothing), under the same cap
    confine_stream("null://", None, caps_from_env().stream_memory_mb)
    watch_host(lambda: os._exit(1))   # a child never outlives the process that asked for it
    collect_on_own_thread()   # never on a librdkafka thread (kafka/garbage.py)
    print_stacks_on_crash()
    try:
        answer = (True, fn(*args))
    except BaseException as exc:  # anything the stream's code raised (SystemExit too)
        answer = (False, child_error(exc, secrets))
    conn.send(answer)
    conn.close()
