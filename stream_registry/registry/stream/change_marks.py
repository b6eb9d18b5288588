"""What a persisted offset says about the change it came from, believed only when it is provably ours.

A stream persists an offset change (the Kafka commit; exactly-once: the sink's store, then the commit) before
the host records it in its history. If the host dies in between, the pending row outlives the change, and a
new stream process handed that row would apply it a second time. So every commit of a partition carries, in
Kafka's per-partition metadata string (OffsetCommit's `committed_metadata`, which brokers cap at
`offset.metadata.max.bytes`, 4096 by default), the last change this stream persisted on it: a ChangeMark. A
stream taking the partition over reads it with the committed offset (one batched `committed()` call) and the
offset gate reconciles its waiting change with it: a change already persisted is reported as applied, never
applied again; one an even later change followed is superseded.

Commit metadata is readable and writable by any member of the group: another host's stream on the same group
(a rolling upgrade, a second environment), a plain consumer, a script. So a mark is believed only when it is
provably this stream's, about this change:

- it names the stream definition: `identity`, a random id made when the stream is created (state_store), so a
  stream dropped and created again, or the same name on another host's state directory, is another stream;
- its change id is unique beyond the state directory: (identity, change id), change ids growing within one
  identity, so "an equal or greater id" means "this change, or a later call of this stream";
- it is authenticated: an HMAC-SHA256 over the identity, the partition and the mark, keyed by a secret kept
  in the state directory with the identity (MarkKey), handed to the stream's tasks through their spawn pipe,
  never written to any output, log, repr or environment.

"Was this change persisted on this partition" is answered by the mark alone, never by comparing the clocks of
two processes (a task whose request arrived late stamps it later than the mark another task wrote for it). A
mark that is not ours (another identity, a bad or missing MAC, a copy from another partition, garbage) is
foreign: the group's committed offset is what is known, as for any other member's commit.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass, field

from ...model import PartitionKey

PREFIX = "mgstreams:"
MAX_METADATA = 4096   # offset.metadata.max.bytes' default: a longer string fails the whole commit
IDENTITY_BYTES = 16
KEY_BYTES = 32
MAC_HEX = 32          # 128 bits of the HMAC-SHA256: far beyond guessing, and short in a 4 KiB metadata string


@dataclass(frozen=True)
class ChangeMark:
    """The change a committed offset came from: its id, where it moved the partition, and from where."""
    change_id: int
    offset: int
    previous: int | None = None

    def about(self, change_id: int) -> bool:
        """Does this (authenticated, our stream's) mark say what became of change `change_id`: persisted (the
        same id) or followed by a later change of this stream (a greater one)?"""
        return self.change_id >= change_id


@dataclass(frozen=True)
class MarkKey:
    """A stream definition's identity and its mark-signing key (the secret never in a repr)."""
    identity: str
    secret: bytes = field(repr=False)

    @staticmethod
    def new() -> MarkKey:
        """A new stream definition's (create; a stream process given none gets one no mark of before matches)."""
        return MarkKey(secrets.token_hex(IDENTITY_BYTES), secrets.token_bytes(KEY_BYTES))

    def encode(self, tp: PartitionKey, mark: ChangeMark) -> str:
        """The metadata string a commit of `tp` carries ("" when it would not fit the broker's cap)."""
        body = {"stream": self.identity, "change": mark.change_id, "offset": mark.offset, "previous": mark.previous}
        body["mac"] = self._mac(tp, body)
        text = PREFIX + json.dumps(body, separators=(",", ":"))
        return text if len(text.encode()) <= MAX_METADATA else ""

    def decode(self, tp: PartitionKey, metadata: str | None) -> ChangeMark | None:
        """The mark in `tp`'s committed metadata when it is this stream's and authentic; None for anything
        else (foreign: another stream's, forged, copied from another partition, none, garbage)."""
        if not metadata or not metadata.startswith(PREFIX):
            return None
        try:
            data = json.loads(metadata[len(PREFIX):])
            body = {"stream": data["stream"], "change": data["change"], "offset": data["offset"],
                    "previous": data["previous"]}
            mac = data["mac"]
        except (ValueError, KeyError, TypeError):
            return None
        if body["stream"] != self.identity or not isinstance(mac, str) or \
                not hmac.compare_digest(mac, self._mac(tp, body)):
            return None
        change, offset, previous = body["change"], body["offset"], body["previous"]
        if not all(_count(v) for v in (change, offset)) or not (previous is None or _count(previous)):
            return None
        return ChangeMark(change, offset, previous)

    def encode_stored(self, tp: PartitionKey, mark: ChangeMark) -> str:
        """The mark as an exactly-once sink stores it beside its offsets (offset_store.mark_statements): the same
        signed fields as `encode`, in characters a cypherl line needs no escaping for."""
        body = {"stream": self.identity, "change": mark.change_id, "offset": mark.offset, "previous": mark.previous}
        previous = "-" if mark.previous is None else str(mark.previous)
        return f"{self.identity}.{mark.change_id}.{mark.offset}.{previous}.{self._mac(tp, body)}"

    def decode_stored(self, tp: PartitionKey, text: str | None) -> ChangeMark | None:
        """A mark the sink stores for `tp` when it is this stream's and authentic (see `decode`); None otherwise."""
        parts = text.split(".") if isinstance(text, str) else []
        if len(parts) != 5 or not all(p.isdigit() for p in parts[1:3]) or not (parts[3] == "-" or parts[3].isdigit()):
            return None
        identity, change, offset, previous, mac = parts
        body = {"stream": identity, "change": int(change), "offset": int(offset),
                "previous": None if previous == "-" else int(previous), "mac": mac}
        return self.decode(tp, PREFIX + json.dumps(body, separators=(",", ":")))

    def _mac(self, tp: PartitionKey, body: dict) -> str:
        signed = json.dumps([tp[0], tp[1], body["stream"], body["change"], body["offset"], body["previous"]],
                            separators=(",", ":"))
        return hmac.new(self.secret, signed.encode(), hashlib.sha256).hexdigest()[:MAC_HEX]


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True)
class Committed:
    """A partition's committed offset as a stream taking it over reads it (None: none, or not read), and the
    change mark it carries when the mark is ours (None: no mark, or a foreign one). `nothing`: the group answered
    that nothing is committed (not an error, not unread): a new group's partition, started where the stream's
    auto.offset.reset says."""
    offset: int | None = None
    mark: ChangeMark | None = None
    nothing: bool = False
