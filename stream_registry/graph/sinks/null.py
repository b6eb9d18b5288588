"""`null://`: discards batches, counting them (benchmarks measure everything but the graph with it)."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ...errors import ConfigError
from ...model import PartitionKey
from ..offset_store import Continuation, continuation, offsets_in_statements
from ..statement import Statement
from .protocol import Closing, Written
from .uri import check_options, shown_uri


class NullSink(Closing):
    """Discards batches, counting them: measures everything but the graph."""

    def __init__(self) -> None:
        self.statements = 0
        self.batches = 0
        self._offsets: dict[tuple[str, str, int], int] = {}

    def write(self, statements: Sequence[Statement], *,
              expect: Mapping[PartitionKey, int | None] | None = None) -> Written:
        end = offsets_in_statements(statements)
        if end and continuation(self._offsets, end, expect) is Continuation.DONE:
            return Written.ALREADY_APPLIED
        self.statements += len(statements)
        self.batches += 1
        self._offsets.update(end)
        return Written.APPLIED

    def stored_offsets(self, stream: str, partitions: Iterable[PartitionKey] | None = None
                       ) -> dict[PartitionKey, int]:
        """Kept in memory: an exactly-once stream on null:// survives a restart of its stream, not of its process."""
        return {PartitionKey(topic, partition): offset for (name, topic, partition), offset in self._offsets.items()
                if name == stream}

    def stored_marks(self, stream: str, partitions: Iterable[PartitionKey] | None = None
                     ) -> dict[PartitionKey, str]:
        """None kept: null:// keeps its offsets only while its stream process lives, and so do the marks."""
        return {}

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"NullSink(batches={self.batches}, statements={self.statements})"


def parse_null(parts: Any, query: dict[str, str], uri: str) -> None:
    check_options(query, set(), uri)
    if parts.netloc or parts.path not in ("", "/"):
        raise ConfigError(f"sink: null:// takes no host or path, got {shown_uri(uri)!r}")


def open_null(settings: None, credentials: Mapping[str, str]) -> NullSink:
    return NullSink()
