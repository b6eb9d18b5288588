"""An event's place in its source's log, per connector, so that "newer" means what the source means by it.

Each connector has its own position (Debezium's `source` block); the event's time is not one: a snapshot read
carries the time the row was read, so a change committed during the snapshot would look older than the read.

- PostgreSQL: `lsn`; MySQL and MariaDB: binlog file index (a number: `mysql-bin.1000000` follows
  `mysql-bin.999999`), `pos`, `row`; SQL Server: `commit_lsn`, `change_lsn`, `event_serial_no`; Db2 and
  Informix: `commit_lsn`, `change_lsn`; Oracle: `commit_scn` (or `scn`), `scn`, `ssn`; MongoDB: `ts_ms` (seconds
  of the oplog time) and `ord`; Cassandra: the commit log segment and `pos`; any other: the event's time.
- A snapshot read sorts before the streaming events at the same log position (the snapshot is taken at the
  position the stream then starts from).
- MySQL binlog coordinates compare only within the binlog of one server, the one the connector reads. Two events
  that both carry a GTID are compared by it instead: within one GTID origin (the server UUID that committed the
  transaction, whichever server's binlog it was read from) by its transaction number; across origins (the
  writes of a new primary after a failover, whose binlog may start again at 000001) by the source's event time,
  `ts_ms`, as Debezium's own guidance for consumers says. A snapshot read carries no GTID (nor a server id): it
  compares by coordinates, against the binlog it was taken on. Without GTIDs a failover cannot be ordered.

`Position.text` is fixed-width text that sorts as the positions do, so the graph compares it in Cypher.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

_DIGITS = re.compile(r"(\d+)")


class Position(NamedTuple):
    """(A named tuple: one is made per record.)"""
    text: str
    origin: str = ""     # MySQL's GTID origin ("" without one): positions that both have one compare by it
    sequence: str = ""   # within that origin: the GTID's transaction number, then the event's place in it
    time: int = 0        # the source's event time, ms: orders events of two GTID origins

    def at_least(self, other: Position) -> bool:
        """Whether this event is as new as `other` or newer (the graph's guard, cypher.not_newer, says the same)."""
        if self.origin and other.origin:
            if self.origin == other.origin:
                return self.sequence >= other.sequence
            return self.time >= other.time
        return self.text >= other.text


def source_position(source: Mapping[str, Any], envelope: Mapping[str, Any], snapshot: bool = False) -> Position:
    """The event's Position (ValueError when the source block holds none)."""
    phase = "0" if snapshot else "1"
    time = _time_ms(source, envelope)
    if source.get("lsn") is not None:                                    # PostgreSQL
        return Position(f"pg:{int(source['lsn']):020d}:{phase}", time=time)
    if source.get("file") is not None and source.get("pos") is not None:
        if str(source.get("connector")) == "cassandra" or "keyspace" in source:
            return Position(f"ca:{_index(source['file']):020d}:{int(source['pos']):020d}:{phase}", time=time)
        return _mysql(source, phase, time)
    if source.get("commit_lsn") is not None or source.get("change_lsn") is not None:   # SQL Server, Db2, Informix
        commit = _lsn(source.get("commit_lsn") or source.get("change_lsn"))
        change = _lsn(source.get("change_lsn") or "0") if not snapshot else _lsn("0")
        serial = int(source.get("event_serial_no") or 0)
        return Position(f"lsn:{commit}:{phase}:{change}:{serial:010d}", time=time)
    if source.get("scn") is not None or source.get("commit_scn") is not None:          # Oracle
        committed = int(source.get("commit_scn") or source.get("scn") or 0)
        scn = int(source.get("scn") or 0)
        return Position(f"or:{committed:030d}:{phase}:{scn:030d}:{int(source.get('ssn') or 0):010d}", time=time)
    if source.get("ord") is not None and source.get("ts_ms") is not None:              # MongoDB
        return Position(f"mo:{int(source['ts_ms']) // 1000:015d}:{phase}:{int(source['ord']):010d}", time=time)
    for name, scale in (("ts_ns", 1), ("ts_us", 1_000), ("ts_ms", 1_000_000)):
        for holder in (source, envelope):
            if holder.get(name) is not None:
                return Position(f"ts:{int(holder[name]) * scale:025d}", time=time)
    raise ValueError("value.source has no position (lsn, file/pos, commit_lsn, scn, ord, ts_ms)")


def _time_ms(source: Mapping[str, Any], envelope: Mapping[str, Any]) -> int:
    for holder in (source, envelope):
        if holder.get("ts_ms") is not None:
            return int(holder["ts_ms"])
    return 0


def _index(file: Any) -> int:
    """The binlog (or commit log segment) index: the last number in the file name."""
    numbers = _DIGITS.findall(str(file))
    if not numbers:
        raise ValueError(f"value.source.file {file!r} holds no index")
    return int(numbers[-1])


def _lsn(text: Any) -> str:
    """SQL Server's and Db2's `0000002a:00000758:0003` (hex parts) or Informix's decimal LSN, fixed-width."""
    text = str(text)
    parts = [int(p, 16) for p in text.split(":")] if ":" in text else [0, 0, int(text)]
    return ":".join(f"{p:020d}" for p in parts)


def _mysql(source: Mapping[str, Any], phase: str, time: int) -> Position:
    """Binlog coordinates (file index, pos, row); with a GTID (MySQL `uuid:N`, MariaDB `domain-server-N`) also its
    origin and N, which order the transactions of that origin on every server (a replica's binlog keeps the
    GTIDs it replicated)."""
    pos, row = int(source["pos"]), int(source.get("row") or 0)
    text = f"my:{_index(source['file']):012d}:{pos:020d}:{row:010d}:{phase}"
    gtid = source.get("gtid")
    if not gtid:
        return Position(text, "", time=time)
    gtid = str(gtid)
    origin, number = gtid.rsplit(":", 1) if ":" in gtid else gtid.rsplit("-", 1)
    digits = _DIGITS.findall(number)
    return Position(text, f"gtid:{origin}", f"{int(digits[-1]) if digits else 0:020d}:{pos:020d}:{row:010d}", time)
