"""One record, one line: a log line's values cannot forge another line.

Values a caller chose (a stream's group, a sink, a transformation's error, a
payload in a Kafka error) reach log messages. A newline in one of them would
start a line of the caller's making (`... WARNING mgstreams.host: token rotated`).
`OneLineFormatter` escapes every control, format and separator character of a
record's message (`\\n` becomes the two characters backslash and n), and indents
each line of an attached traceback so that none starts where a record starts.
Both the host and its stream processes log through it.
"""
from __future__ import annotations

import logging

from .addresses import is_unsafe_char

TRACEBACK_INDENT = "    | "


def one_line(text: str) -> str:
    """`text` with every control, format and separator character escaped (`\\n`, `\\x1b`, `\\u202e`)."""
    if text.isprintable():
        return text
    return "".join(ascii(c)[1:-1] if is_unsafe_char(c) else c for c in text)


class OneLineFormatter(logging.Formatter):
    """logging.Formatter whose message part is one line whatever its arguments hold."""

    def formatMessage(self, record: logging.LogRecord) -> str:   # noqa: N802 (logging's name)
        record.message = one_line(record.message)
        return super().formatMessage(record)

    def formatException(self, ei) -> str:   # noqa: N802
        return "\n".join(TRACEBACK_INDENT + one_line(line) for line in super().formatException(ei).splitlines())

    def formatStack(self, stack_info: str) -> str:   # noqa: N802
        return "\n".join(TRACEBACK_INDENT + one_line(line) for line in stack_info.splitlines())


def one_line_logging(level: int | str, fmt: str) -> None:
    """logging.basicConfig(level, format) with the one-line formatter on the root handler."""
    logging.basicConfig(level=level, format=fmt)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(OneLineFormatter(fmt))
