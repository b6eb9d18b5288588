"""What every sink is: the Sink protocol, what a write did (Written) and how a URI scheme plugs in (Scheme)."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, Self

from ...model import PartitionKey
from ..statement import Statement


class Written(StrEnum):
    """What write() did with an exactly-once batch."""
    APPLIED = "applied"
    ALREADY_APPLIED = "already applied"   # its end offsets were stored already: a lost ack, a retried batch


class Sink(Protocol):
    def write(self, statements: Sequence[Statement], *,
              expect: Mapping[PartitionKey, int | None] | None = None) -> Written:
        """Apply one batch in one transaction; raise SinkError if it was not applied.

        An exactly-once batch ends in offset_statements: one whose end offsets
        are already stored is not applied again (ALREADY_APPLIED). With
        `expect` ((topic, partition) -> the stored offset the batch continues
        from, None for none), the stored offsets are compared with it in the
        batch's own transaction first: StoredOffsetsConflict, nothing written,
        when they differ (offset_store.continuation)."""

    def stored_offsets(self, stream: str, partitions: Iterable[PartitionKey] | None = None
                       ) -> dict[PartitionKey, int]:
        """The offsets an exactly-once stream stored with its batches (offset_store); SinkError if unreadable."""

    def stored_marks(self, stream: str, partitions: Iterable[PartitionKey] | None = None
                     ) -> dict[PartitionKey, str]:
        """The change marks an exactly-once stream stored beside its offsets (offset_store.mark_statements), as
        stored (the stream authenticates them); SinkError if unreadable."""

    def close(self) -> None:
        """Release files and connections; idempotent."""

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc_info: object) -> None: ...


@dataclass(frozen=True)
class Scheme:
    """How to check a URI of one scheme (pure: the parsed URI, its query, the URI as given -> settings) and how
    to open a sink from those settings and the stream's credentials."""

    parse: Callable[[Any, dict[str, str], str], Any]
    open: Callable[[Any, Mapping[str, str]], Sink]


class Closing:
    """`with sink:` closes it."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
