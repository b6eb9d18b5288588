"""Offsets as files: `kafka-consumer-groups --reset-offsets --export` CSV and `rpk group seek --to-file`.

An export is `topic,partition,offset` per line, no header, as Kafka's tool
writes it; an import takes that form or rpk's `TOPIC PARTITION OFFSET`
(whitespace separated), one partition per line, absolute offsets. A file is
parsed whole before anything is applied: every bad line is reported with its
line number, and a file with any bad line applies nothing. Blank lines and
lines starting with `#` are skipped.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum

from .errors import ConfigError
from .model import PartitionKey, PartitionOffsets
from .offset_spec import INT64_MAX

INT32_MAX = 2 ** 31 - 1
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_DIGITS = re.compile(r"[0-9]{1,19}")
MAX_SHOWN_ERRORS = 5


class OffsetSource(StrEnum):
    COMMITTED = "committed"   # the group's committed offsets (what the stream resumes from when stopped)
    POSITION = "position"     # the running consumer's positions (partitions it holds)


class OffsetFileError(ConfigError):
    """An offsets file with bad lines; nothing in it was applied."""


def export_offsets(rows: Iterable[PartitionOffsets], source: OffsetSource | str = OffsetSource.COMMITTED
                   ) -> tuple[list[str], list[str]]:
    """(`topic,partition,offset` lines, notes on the partitions left out because they have no such offset)."""
    try:
        source = OffsetSource(source)
    except ValueError:
        raise ConfigError(f"source: expected 'committed' or 'position', got {source!r}") from None
    lines, notes = [], []
    for row in rows:
        offset = row.committed_offset if source == OffsetSource.COMMITTED else row.position
        if offset is None:
            why = "no committed offset" if source == OffsetSource.COMMITTED else \
                "no position (not held by the running stream)"
            notes.append(f"{row.topic}:{row.partition} has {why}; left out")
        else:
            lines.append(f"{row.topic},{row.partition},{offset}")
    return lines, notes


def parse_offsets_file(text: str, where: str = "file") -> dict[PartitionKey, int]:
    """Offsets per partition from a file's text; OffsetFileError naming every bad line (up to a few)."""
    offsets: dict[PartitionKey, int] = {}
    first_seen: dict[PartitionKey, int] = {}
    errors: list[str] = []
    for number, raw in enumerate(text.removeprefix("\ufeff").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            tp, offset = _parse_line(line)
        except ValueError as exc:
            errors.append(f"line {number}: {exc}")
            continue
        if tp in first_seen:
            errors.append(f"line {number}: {tp[0]}:{tp[1]} is already set on line {first_seen[tp]}")
            continue
        first_seen[tp] = number
        offsets[tp] = offset
    if errors:
        more = f" (and {len(errors) - MAX_SHOWN_ERRORS} more bad lines)" if len(errors) > MAX_SHOWN_ERRORS else ""
        raise OffsetFileError(f"{where}: " + "; ".join(errors[:MAX_SHOWN_ERRORS]) + more +
                              "; nothing was applied")
    if not offsets:
        raise OffsetFileError(f"{where}: names no partition (expected lines 'topic,partition,offset' or "
                              "'TOPIC PARTITION OFFSET')")
    return offsets


def offsets_spec(offsets: dict[PartitionKey, int]) -> dict[str, int]:
    """The offset spec (a per-partition map) that sets exactly these offsets."""
    return {f"{topic}:{partition}": offset for (topic, partition), offset in offsets.items()}


def _parse_line(line: str) -> tuple[PartitionKey, int]:
    fields = [f.strip() for f in line.split(",")] if "," in line else line.split()
    if len(fields) != 3:
        raise ValueError(f"expected 'topic,partition,offset' or 'TOPIC PARTITION OFFSET', got {_shown(line)}")
    topic, partition, offset = fields
    if not _TOPIC.fullmatch(topic):
        raise ValueError(f"topic {_shown(topic)} is not a Kafka topic name")
    if not _DIGITS.fullmatch(partition) or int(partition) > INT32_MAX:
        raise ValueError(f"partition {_shown(partition)} is not a partition number")
    if not _DIGITS.fullmatch(offset) or int(offset) > INT64_MAX:
        raise ValueError(f"offset {_shown(offset)} is not an offset (an integer >= 0)")
    return PartitionKey(topic, int(partition)), int(offset)


def _shown(text: str, limit: int = 60) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else f"{shown[:limit - 15]}...{shown[-8:]} ({len(text)} characters)"
