"""A crash in a C library (librdkafka, a driver) reported with every thread's Python stack.

Without it a process that faults ends with a bare signal (-11) and nothing in its log or stderr: seen once in CI, a
`mgstreams backfill` that printed nothing. Python's faulthandler writes the stacks to the process's original
stderr (the host's log, for a stream process) from the signal handler, with no allocation.
"""
from __future__ import annotations

import faulthandler
import sys


def print_stacks_on_crash() -> None:
    """Enable faulthandler on the process's original stderr; without one that has a descriptor, nothing."""
    try:
        faulthandler.enable(file=sys.__stderr__, all_threads=True)   # type: ignore[arg-type]
    except (AttributeError, ValueError, OSError, RuntimeError):
        pass   # no stderr to write to (closed, or not a file): the process runs as before
