"""A transformation module that takes seconds to import: a stream process that starts slowly (issue 33: an
alter's new process starts without holding its stream's lock)."""
from __future__ import annotations

import time

import stream_helpers

IMPORT_S = 6.0
time.sleep(IMPORT_S)


def slow_start_transform(messages):
    """stream_helpers.offsets_transform, from a module that took IMPORT_S to import."""
    return stream_helpers.offsets_transform(messages)
