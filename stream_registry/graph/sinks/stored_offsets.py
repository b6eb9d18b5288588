"""Reading the offsets an exactly-once stream stored with its batches: from a stopped stream's sink URI, or
from an open sink within a deadline (a short outage during a rebalance is waited out)."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from ...errors import SinkError
from ...model import PartitionKey
from ..cypherl_frames import offsets_in_cypherl
from ..sink_faults import is_transient
from .cypherl import CypherlSettings
from .policy import OutputPolicy
from .protocol import Sink
from .schemes import NO_CREDENTIALS, SCHEMES, parse_sink_uri

STORED_OFFSETS_DEADLINE_S = 10.0
STORED_OFFSETS_RETRY_S = 0.2


def read_stored_offsets(uri: str, stream: str, credentials: Mapping[str, str] = NO_CREDENTIALS,
                        output: OutputPolicy | None = None, partitions: Iterable[PartitionKey] | None = None
                        ) -> dict[PartitionKey, int]:
    """A stopped exactly-once stream's stored offsets, read without opening its sink for writing
    (a cypherl file is not created; null:// keeps none once its stream process is gone)."""
    scheme, settings = parse_sink_uri(uri, output)
    if isinstance(settings, CypherlSettings):
        try:
            return offsets_in_cypherl(settings.path, stream, partitions)
        except OSError as exc:
            raise SinkError(f"sink cypherl://{settings.path}: reading the stored offsets failed: {exc}") from None
    if scheme == "null":
        return {}
    with SCHEMES[scheme].open(settings, credentials or NO_CREDENTIALS) as sink:
        return sink.stored_offsets(stream, partitions)


def read_stored_offsets_within(sink: Sink, stream: str, partitions: Iterable[PartitionKey] | None = None, *,
                               deadline_s: float = STORED_OFFSETS_DEADLINE_S,
                               retry_s: float = STORED_OFFSETS_RETRY_S,
                               sleep: Callable[[float], None] = time.sleep) -> dict[PartitionKey, int]:
    """`sink.stored_offsets`, retried within `deadline_s` while it fails transiently (a short sink outage
    during a rebalance). Past the deadline, a SinkError(transient=True) saying how long it tried; a
    non-transient failure at once. For the rebalance path: show the error, keep the partitions unstarted,
    and call again later, rather than failing the stream for good."""
    partitions = list(partitions) if partitions is not None else None
    deadline = time.monotonic() + deadline_s
    attempts = 0
    while True:
        attempts += 1
        try:
            return sink.stored_offsets(stream, partitions)
        except Exception as exc:
            if not is_transient(exc):
                raise
            left = deadline - time.monotonic()
            if left <= 0:
                raise SinkError(f"sink: the stored offsets of stream {stream!r} could not be read within "
                                f"{deadline_s:g} s ({attempts} attempt(s)): {exc}", transient=True) from None
            sleep(min(retry_s * 2 ** min(attempts - 1, 5), left))
