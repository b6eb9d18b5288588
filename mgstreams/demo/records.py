"""Reading what the demo's sinks wrote: transfer statements with the topic, partition and offset they came from."""
from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from stream_registry import StreamError

from .results import Record

_WHERE = re.compile(r't\.kafka_topic = "(?P<topic>[^"\\]*)", t\.kafka_partition = (?P<partition>\d+), '
                    r't\.kafka_offset = (?P<offset>\d+);$')


def normalize(line: str) -> str:
    return " ".join(line.split())


def read_cypherl(paths: Iterable[Path]) -> list[Record]:
    """Transfer statements in file order; a line without kafka topic/partition/offset is an error."""
    records = []
    for path in paths:
        if not path.exists():
            continue
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip() or line.startswith("//"):   # a batch's frame line (a comment)
                    continue
                text = normalize(line)
                match = _WHERE.search(text)
                if match is None:
                    raise StreamError(f"{path}:{number}: not a transfer statement with kafka topic/partition/"
                                      f"offset: {text[:120]!r}")
                records.append(Record(match["topic"], int(match["partition"]), int(match["offset"]), text))
    return records
