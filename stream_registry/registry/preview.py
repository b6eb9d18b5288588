"""A preview of what a stream would write (Memgraph's CHECK STREAM), run where the stream's own code may run.

A preview runs the stream's transformation, which is user code: a segfault in
its C extension or an `os.abort()` must end the preview, not the process that
asked for it. A stream host therefore runs each preview in a one-shot child
process (`preview_in_child`), spawned like a stream's process and tied to its
host the same way; an embedded registry runs it in place (`preview`).
"""
from __future__ import annotations

import multiprocessing
import os
import threading
from typing import Mapping

from ..config import StreamConfig
from ..errors import (ConfigError, KafkaOperationError, OffsetSpecError, SinkError, StreamError,
                      TransformError)
from ..graph.transform import Message, plain_parameters, run_transformation
from ..kafka.sample import read_records
from ..offsets import PreviewStatement
from ..redaction import redact
from .runner import load_stream_transformation
from .stream_process import CHILD_POLL_S, exit_cause

TP = tuple[str, int]
SPAWN_GRACE_S = 15.0   # beyond the preview's own timeout: starting the interpreter and importing the transformation
_ERRORS = {cls.__name__: cls for cls in (StreamError, ConfigError, OffsetSpecError, TransformError,
                                         KafkaOperationError, SinkError)}


def preview(config: StreamConfig, starts: Mapping[TP, int], ends: Mapping[TP, int], limit: int,
            timeout: float) -> list[PreviewStatement]:
    """The statements the transformation makes of up to `limit` records per partition from `starts`,
    one record at a time (each statement is known by its offset). Nothing is committed or written."""
    transformation = load_stream_transformation(config)
    records = read_records(config, starts, ends, limit, timeout)
    out = []
    for tp in starts:
        for record in records[tp]:
            for statement in run_transformation(transformation, [Message.from_kafka(record)],
                                                name=config.transform):
                out.append(PreviewStatement(tp[0], tp[1], record.offset(), statement.query,
                                            plain_parameters(statement.parameters)))
    return out


def preview_in_child(config: StreamConfig, starts: Mapping[TP, int], ends: Mapping[TP, int], limit: int,
                     timeout: float) -> list[PreviewStatement]:
    """`preview` in a spawned child process; its errors come back as the same StreamError classes, and a
    child that dies (a signal, an exit) is a TransformError naming how it ended."""
    context = multiprocessing.get_context("spawn")
    conn, child_end = context.Pipe(duplex=False)
    process = context.Process(target=_child_main, args=(child_end, config, dict(starts), dict(ends), limit,
                                                        timeout), daemon=True,
                              name=f"mgstreams-check-{config.name}")
    process.start()
    child_end.close()
    try:
        if not conn.poll(timeout + SPAWN_GRACE_S):
            raise TransformError(f"check: the preview of stream {config.name!r} did not finish within "
                                 f"{timeout:g} s and its process was killed")
        answer = conn.recv()
    except (EOFError, OSError):
        process.join(5.0)
        raise TransformError(f"check: the preview's process {exit_cause(process.exitcode)} while running "
                             f"transformation {config.transform!r}; nothing was changed") from None
    finally:
        if process.is_alive():
            process.kill()
        process.join(5.0)
        conn.close()
    if answer[0] == "ok":
        return answer[1]
    raise _ERRORS.get(answer[1], StreamError)(answer[2])


def _child_main(conn, config: StreamConfig, starts, ends, limit: int, timeout: float) -> None:
    _leave_with(os.getppid())
    try:
        answer = ("ok", preview(config, starts, ends, limit, timeout))
    except StreamError as exc:
        name = type(exc).__name__
        answer = ("error", name if name in _ERRORS else "StreamError", str(exc))
    except BaseException as exc:  # anything else the transformation's code raised (SystemExit too)
        answer = ("error", "TransformError",
                  redact(f"check: transformation {config.transform!r} failed: {type(exc).__name__}: {exc}",
                         config.secret_values()))
    conn.send(answer)
    conn.close()


def _leave_with(host: int) -> None:
    """A preview never outlives the process that asked for it."""
    def watch() -> None:
        while os.getppid() == host:
            threading.Event().wait(CHILD_POLL_S)
        os._exit(1)
    threading.Thread(target=watch, name="mgstreams-check-host-watch", daemon=True).start()
