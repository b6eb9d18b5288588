"""A CPU-bound transformation for bench/tasks_scaling.py: pure Python work per message (it holds the GIL, as a
transformation parsing and reshaping records in Python does), one small statement per batch.

`$BENCH_CPU_WORK` (default 3000) is the loop's length per message: about 0.1 ms on this machine.
"""
from __future__ import annotations

import os

WORK = int(os.environ.get("BENCH_CPU_WORK", "3000"))


def busy(messages):
    checksum = 0
    for i in range(messages.total_messages()):
        payload = messages.message_at(i).payload() or b""
        value = len(payload)
        for step in range(WORK):
            value = (value * 31 + step) % 1_000_003
        checksum ^= value
    return [{"query": "MERGE (b:BenchBatch {checksum: $checksum})", "parameters": {"checksum": checksum}}]
