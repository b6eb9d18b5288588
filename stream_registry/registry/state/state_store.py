"""The registry's durable state: one SQLite file per state directory.

SQLite gives atomic writes (a transaction per change) and lets other processes
(the CLI, a Spark driver) read the same file. The file is created 0600: it holds
credentials, and each stream's mark key (change_marks.MarkKey: the stream
definition's identity, made at create, and the secret its change marks are
signed with), kept beside its row and never in its config.

Why one module (and one class) over the size limit: every statement on the state
file is here, because the tables change together inside one transaction under
one lock: a change's pending row becomes its history row atomically (recorded,
superseded, cancelled), a revert ends the rows it supersedes in the transaction
that opens it, a drop removes a stream's rows from every table at once. Split
along tables, those transactions would span modules.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from ...config import StreamConfig
from ...errors import ConfigError, StreamError, StreamNotFound
from ...model import (
    ChangeStatus,
    GateEvent,
    HistoryEntry,
    PartitionKey,
    PendingOffset,
    Realignment,
    RecordsLost,
    SetAside,
    StreamStatus,
)
from ..stream.change_marks import MarkKey

STATE_FILE = "mgstreams.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS streams (
    name TEXT PRIMARY KEY,
    config TEXT NOT NULL,
    desired_running INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL,
    error TEXT
);
CREATE TABLE IF NOT EXISTS pending_changes (
    stream TEXT NOT NULL,
    change_id INTEGER NOT NULL,
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    requested_at REAL NOT NULL,
    clamped INTEGER NOT NULL DEFAULT 0,
    previous_offset INTEGER,
    note TEXT,
    reason TEXT,
    onward INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (stream, topic, partition, change_id)
);
CREATE TABLE IF NOT EXISTS offset_history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    stream TEXT NOT NULL,
    changed_at REAL NOT NULL,
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    previous_offset INTEGER,
    offset INTEGER NOT NULL,
    status TEXT NOT NULL,
    message TEXT
);
CREATE TABLE IF NOT EXISTS loss_acknowledged (
    stream TEXT PRIMARY KEY,
    up_to INTEGER NOT NULL
);
"""


class StateStore:
    """The state file's one writer. Why one class this big: see the module docstring."""

    def __init__(self, state_dir: str | os.PathLike):
        self.state_dir = Path(state_dir)
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.path = self.state_dir / STATE_FILE
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600)
            os.close(fd)
            os.chmod(self.path, 0o600)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(_SCHEMA)
            self._add_column("offset_history", "message", "TEXT")
            if self._add_column("offset_history", "change_id", "INTEGER"):   # one row was one change
                self._db.execute("UPDATE offset_history SET change_id = id")
            self._add_column("pending_changes", "onward", "INTEGER NOT NULL DEFAULT 0")
            self._add_column("pending_changes", "ended", "TEXT")   # cancelled/superseded: not pending any more
            self._add_column("pending_changes", "sink_change", "INTEGER NOT NULL DEFAULT 0")   # an alter's carry-over
            self._add_column("streams", "identity", "TEXT")   # change_marks.MarkKey (an older file: made when first read)
            self._add_column("streams", "mark_key", "TEXT")
            self._migrate_pending()
            # Reads have a connection of their own: under WAL they see what was committed while a write waits for
            # the file's lock (another process holding it), so describe and GET never queue behind a write.
            self._reader = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        except (OSError, sqlite3.Error) as exc:
            raise StreamError(f"state_dir: cannot use {str(state_dir)!r}: {exc}") from None
        self._lock = threading.Lock()
        self._read_lock = threading.Lock()
        # the highest change id handed out by this store: a change handed to a stream before its transaction
        # committed (add_change's before_commit) keeps its id even when the commit fails, never reused
        self._handed_up_to = 0

    def _add_column(self, table: str, column: str, definition: str) -> bool:
        """Bring a state file written by an older version up to date; True when the column was added."""
        if column not in [row[1] for row in self._db.execute(f"PRAGMA table_info({table})")]:
            self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")
            return True
        return False

    def _migrate_pending(self) -> None:
        """An older state file's pending_offsets (one row per partition, no change id): each row its own change."""
        if not self._db.execute("SELECT name FROM sqlite_master WHERE name = 'pending_offsets'").fetchone():
            return
        for column, definition in (("clamped", "INTEGER NOT NULL DEFAULT 0"), ("previous_offset", "INTEGER"),
                                   ("note", "TEXT")):
            self._add_column("pending_offsets", column, definition)
        self._db.execute("INSERT INTO pending_changes (stream, change_id, topic, partition, offset, requested_at, "
                         "clamped, previous_offset, note) SELECT stream, rowid + (SELECT COALESCE(MAX(id), 0) FROM "
                         "offset_history), topic, partition, offset, requested_at, clamped, previous_offset, note "
                         "FROM pending_offsets")
        self._db.execute("DROP TABLE pending_offsets")

    def close(self) -> None:
        with self._lock:
            self._db.close()
        with self._read_lock:
            self._reader.close()

    def _write(self, *statements: tuple[str, tuple]) -> None:
        """Apply statements in one transaction: all or nothing."""
        def run(db):
            for sql, args in statements:
                db.execute(sql, args)
        self._transaction(run)

    def _transaction(self, work):
        """Run `work(db)` in one transaction (all or nothing) and return what it returns."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                result = work(self._db)
                self._db.execute("COMMIT")
                return result
            except sqlite3.Error as exc:
                self._roll_back()
                raise StreamError(f"state: cannot write {self.path}: {exc}") from None
            except BaseException:   # `work` raised (a hand-off inside the transaction): nothing of it stays
                self._roll_back()
                raise

    def _roll_back(self) -> None:
        if self._db.in_transaction:  # a BEGIN that failed (database busy) left nothing to undo
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    def _new_change_id(self, db) -> int:
        """The next change id (inside a transaction, under the lock): above every stored one and every one handed."""
        self._handed_up_to = max(_next_change_id(db), self._handed_up_to + 1)
        return self._handed_up_to

    def _read(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._read_lock:
            return self._reader.execute(sql, args).fetchall()

    # -- streams ----------------------------------------------------------
    def load_streams(self) -> list[tuple[StreamConfig, bool, StreamStatus, str | None]]:
        rows = self._read("SELECT name, config, desired_running, status, error FROM streams ORDER BY name")
        return [(_stored_config(name, cfg), bool(desired), StreamStatus(status), error)
                for name, cfg, desired, status, error in rows]

    def insert_stream(self, config: StreamConfig) -> None:
        """A new stream definition, with an identity and mark key of its own (one dropped and created again is
        another stream: no mark of its predecessor is believed)."""
        key = MarkKey.new()
        self._write(("INSERT INTO streams (name, config, desired_running, status, identity, mark_key) "
                     "VALUES (?, ?, 0, ?, ?, ?)", (config.name, _config_json(config), StreamStatus.CREATED.value,
                                                   key.identity, key.secret.hex())))

    def mark_key(self, name: str) -> MarkKey:
        """The stream's identity and the key its change marks are signed with (shared by its tasks); a row an
        older version wrote gets one now, once."""
        for _ in range(2):
            rows = self._read("SELECT identity, mark_key FROM streams WHERE name = ?", (name,))
            if not rows:
                raise StreamNotFound(f"name: no stream named {name!r}")
            identity, secret = rows[0]
            if identity and secret:
                return MarkKey(identity, bytes.fromhex(secret))
            key = MarkKey.new()
            self._write(("UPDATE streams SET identity = ?, mark_key = ? WHERE name = ? AND identity IS NULL",
                         (key.identity, key.secret.hex(), name)))
        raise StreamError(f"stream {name!r}: its mark key could not be kept in the state store")

    def update_config(self, config: StreamConfig, pending_from: Mapping[PartitionKey, int] | None = None) -> None:
        """An altered stream's config (its status, desired state, offsets and history stay); `pending_from`: where
        partitions with a pending change stood when an exactly-once stream's sink changed (their changes move them
        from there in the new sink: the pending rows' previous offsets), in the same transaction."""
        self._write(("UPDATE streams SET config = ? WHERE name = ?", (_config_json(config), config.name)),
                    *(("UPDATE pending_changes SET previous_offset = ? WHERE stream = ? AND topic = ? AND "
                       "partition = ? AND ended IS NULL", (offset, config.name, tp.topic, tp.partition))
                      for tp, offset in sorted((pending_from or {}).items())))

    def set_status(self, name: str, status: StreamStatus, error: str | None = None,
                   desired_running: bool | None = None) -> None:
        if desired_running is None:
            self._write(("UPDATE streams SET status = ?, error = ? WHERE name = ?", (status.value, error, name)))
        else:
            self._write(("UPDATE streams SET status = ?, error = ?, desired_running = ? WHERE name = ?",
                         (status.value, error, int(desired_running), name)))

    def delete_stream(self, name: str) -> None:
        self._write(("DELETE FROM streams WHERE name = ?", (name,)),
                    ("DELETE FROM pending_changes WHERE stream = ?", (name,)),
                    ("DELETE FROM offset_history WHERE stream = ?", (name,)),
                    ("DELETE FROM loss_acknowledged WHERE stream = ?", (name,)))

    # -- offsets: change sets (owned by change_sets.ChangeSets) -------------------------
    def add_change(self, name: str, rows: list[PlannedRow], supersede: bool, replaces: int | None = None,
                   sink_change: bool = False, before_commit: Callable[[int], None] | None = None) -> int:
        """One call's offsets as pending rows sharing a new change id. The last call wins per partition: an
        earlier row of the partition stays until the stream's gate says what became of it (`supersede=False`,
        a running stream: it may have been applied just before), or goes now (a stopped stream). `replaces`:
        the change a revert reverts: its rows still pending end superseded in the same transaction (their
        history rows now, for a stopped stream; when the gate confirms, for a running one). `sink_change`: the
        rows are an alter's sink change (where the new sink starts), part of the alter: no cancel ends them. A
        row of a later call on a partition whose carry-over is still pending stands in for it (it too starts the
        new sink somewhere): it is a sink change row as well, or cancelling it would leave the new sink storing
        nothing of the partition, refilled from its log start. `before_commit(change_id)`: run inside the
        transaction once the rows are written, before its commit (and its fsync); if it raises, nothing is written."""
        now = time.time()

        def add(db) -> int:
            change_id = self._new_change_id(db)
            carrying = {(t, p) for t, p in db.execute("SELECT topic, partition FROM pending_changes WHERE stream = ? "
                                                      "AND sink_change = 1 AND ended IS NULL", (name,))}
            if replaces is not None:
                db.execute("UPDATE pending_changes SET ended = ?, reason = ? WHERE stream = ? AND change_id = ? "
                           "AND ended IS NULL", (ENDED_SUPERSEDED, f"superseded by change {change_id}", name,
                                                 replaces))
                if supersede:
                    _end_superseded(db, name, now)
            for r in rows:
                if supersede:
                    db.execute("DELETE FROM pending_changes WHERE stream = ? AND topic = ? AND partition = ?",
                               (name, r.topic, r.partition))
                db.execute("INSERT INTO pending_changes (stream, change_id, topic, partition, offset, requested_at, "
                           "clamped, previous_offset, note, onward, sink_change) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           (name, change_id, r.topic, r.partition, r.offset, now, int(r.clamped), r.previous_offset,
                            r.message, int(r.onward), int(sink_change or (r.topic, r.partition) in carrying)))
            if before_commit is not None:
                before_commit(change_id)
            return change_id
        return self._transaction(add)

    def pending(self, name: str) -> dict[PartitionKey, int]:
        """The offset each partition waits for: its latest pending change's."""
        return {PartitionKey(p.topic, p.partition): p.offset for p in self.pending_rows(name)}

    def pending_rows(self, name: str, change_id: int | None = None) -> list[PendingOffset]:
        """The latest pending change of each partition; with `change_id`, that change's rows still pending."""
        if change_id is None:
            return [_pending_row(row) for row in self._read(_LATEST_PENDING + _PENDING_ORDER, (name, name))]
        return [_pending_row(row) for row in self._read(_PENDING_ROWS + " AND change_id = ?" + _PENDING_ORDER,
                                                        (name, change_id))]

    def sink_change_rows(self, name: str, up_to: int) -> list[PendingOffset]:
        """The pending rows (of changes up to `up_to`) that are an alter's sink change, still in flight."""
        return [_pending_row(row) for row in self._read(_PENDING_ROWS + " AND sink_change = 1 AND change_id <= ?"
                                                        + _PENDING_ORDER, (name, up_to))]

    def pending_change_ids(self, name: str) -> set[int]:
        """The ids of the stream's changes that still have a pending row."""
        return {row[0] for row in self._read("SELECT DISTINCT change_id FROM pending_changes WHERE stream = ?",
                                             (name,))}

    def last_change_id(self, name: str) -> int:
        """The newest change id the stream's pending rows hold (0: none)."""
        return self._read("SELECT COALESCE(MAX(change_id), 0) FROM pending_changes WHERE stream = ? AND ended IS "
                          "NULL", (name,))[0][0]

    def drop_superseded(self, name: str) -> None:
        """Keep only each partition's latest pending change (a stream starting is handed those); the rows a cancel
        or a revert ended, which no stream process can apply any more, go (a revert's with their history rows)."""
        def drop(db) -> None:
            _end_superseded(db, name, time.time())
            db.execute("DELETE FROM pending_changes WHERE stream = ? AND ended = ?", (name, ENDED_CANCELLED))
            db.execute("DELETE FROM pending_changes WHERE stream = ? AND change_id < (SELECT MAX(change_id) FROM "
                       "pending_changes AS later WHERE later.stream = pending_changes.stream AND later.topic = "
                       "pending_changes.topic AND later.partition = pending_changes.partition AND later.ended IS "
                       "NULL)", (name,))
        self._transaction(drop)

    def set_reason(self, name: str, change_id: int, topic: str, partition: int, reason: str | None) -> None:
        """Why a pending change is held back (its persist failed), shown until it is applied."""
        self._write(("UPDATE pending_changes SET reason = ? WHERE stream = ? AND topic = ? AND partition = ? "
                     "AND change_id = ? AND ended IS NULL", (reason, name, topic, partition, change_id)))

    def drop_pending(self, name: str, change_id: int, topic: str, partition: int) -> None:
        """A change the stream's gate superseded or cancelled: it leaves without a history row (one a revert
        superseded, with its `superseded` history row)."""
        where = (name, topic, partition, change_id)

        def drop(db) -> None:
            _end_superseded(db, name, time.time(), " AND topic = ? AND partition = ? AND change_id = ?", where[1:])
            db.execute("DELETE FROM pending_changes WHERE stream = ? AND topic = ? AND partition = ? AND "
                       "change_id = ?", where)
        self._transaction(drop)

    def take_pending(self, name: str, up_to: int | None = None, mark_only: bool = False) -> list[PendingOffset]:
        """End the stream's pending rows (of changes up to `up_to`) as cancelled in one transaction; the latest of
        each partition among them. `mark_only`: they stay, marked cancelled (never pending, never handed to a
        stream process again), until the running stream's gate confirms (drop_cancelled) or the next start."""
        limit = (1 << 62) if up_to is None else up_to

        def take(db):
            rows = [row for row in db.execute(_LATEST_PENDING + _PENDING_ORDER, (name, name)).fetchall()
                    if row[7] <= limit]
            if mark_only:
                db.execute("UPDATE pending_changes SET ended = ? WHERE stream = ? AND change_id <= ? AND ended IS "
                           "NULL", (ENDED_CANCELLED, name, limit))
            else:
                db.execute("DELETE FROM pending_changes WHERE stream = ? AND change_id <= ? AND (ended IS NULL OR "
                           "ended = ?)", (name, limit, ENDED_CANCELLED))
            return rows
        return [_pending_row(row) for row in self._transaction(take)]

    def not_applied(self, name: str, rows: list[PendingOffset]) -> list[PendingOffset]:
        """Those of `rows` the history does not hold as applied (a persist that came before a cancel)."""
        applied = {(t, p, c) for t, p, c in self._read(
            "SELECT topic, partition, change_id FROM offset_history WHERE stream = ? AND status IN (?, ?)",
            (name, ChangeStatus.APPLIED.value, ChangeStatus.CLAMPED.value))}
        return [r for r in rows if (r.topic, r.partition, r.change_id) not in applied]

    def drop_cancelled(self, name: str, up_to: int) -> None:
        """The running stream's gate confirmed a cancel: its marked rows go."""
        self._write(("DELETE FROM pending_changes WHERE stream = ? AND change_id <= ? AND ended = ?",
                     (name, up_to, ENDED_CANCELLED)))

    def record_applied(self, name: str, applied: list[GateEvent]) -> None:
        """Changes persisted by a stream (PERSISTED gate events): each becomes a history row of its change id,
        with where the partition really stood and went (the event's previous offset, where the stream saw one,
        else the planned one; the event's offset), what its pending row planned (clamped, message) and the gate's
        note when it went elsewhere than the plan (a move to the end the stream had passed), and the pending row
        goes; one whose pending row is gone was recorded already (a task, or a reconciled change mark, reported it
        twice) and adds nothing. One transaction."""
        now = time.time()

        def record(db) -> None:
            for event in applied:
                change_id, topic, partition, offset = event.change_id, event.topic, event.partition, event.offset
                seen_previous = event.previous_offset
                row = db.execute("SELECT previous_offset, clamped, note FROM pending_changes WHERE stream = ? AND "
                                 "topic = ? AND partition = ? AND change_id = ?",
                                 (name, topic, partition, change_id)).fetchone()
                if row is None:   # recorded already (another task, or a reconciled mark, reported it first)
                    continue
                planned_previous, clamped, note = row
                # a negative origin is librdkafka's "beginning" of a sink that stores nothing: the plan knows more
                previous = planned_previous if seen_previous is None or seen_previous < 0 else seen_previous
                message = "; ".join(m for m in (note, event.reason) if m)
                db.execute("INSERT INTO offset_history (stream, changed_at, topic, partition, previous_offset, "
                           "offset, status, message, change_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           (name, now, topic, partition, previous, offset,
                            (ChangeStatus.CLAMPED if clamped else ChangeStatus.APPLIED).value, message or "",
                            change_id))
                db.execute("DELETE FROM pending_changes WHERE stream = ? AND topic = ? AND partition = ? AND "
                           "change_id = ?", (name, topic, partition, change_id))
        self._transaction(record)

    def record_realigned(self, name: str, moves: list[Realignment]) -> int:
        """An exactly-once stream's realignments to its sink (model.Realignment): history rows sharing one new
        change id (returned). One transaction."""
        now = time.time()

        def record(db) -> int:
            change_id = self._new_change_id(db)
            for m in moves:
                db.execute("INSERT INTO offset_history (stream, changed_at, topic, partition, previous_offset, "
                           "offset, status, message, change_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           (name, now, m.topic, m.partition, m.previous_offset, m.offset,
                            ChangeStatus.REALIGNED.value, m.reason, change_id))
            return change_id
        return self._transaction(record)

    def record_set_aside(self, name: str, records: list[SetAside]) -> None:
        """Poison messages set aside (dead-lettered, or skipped): history rows, one change each."""
        now = time.time()

        def record(db) -> None:
            for r in records:
                status = ChangeStatus.DEAD_LETTERED if r.dead_lettered else ChangeStatus.SKIPPED
                db.execute("INSERT INTO offset_history (stream, changed_at, topic, partition, previous_offset, "
                           "offset, status, message, change_id) VALUES (?, ?, ?, ?, NULL, ?, ?, ?, ?)",
                           (name, now, r.topic, r.partition, r.offset, status.value, r.error, self._new_change_id(db)))
        self._transaction(record)

    def record_lost(self, name: str, losses: list[RecordsLost]) -> None:
        """Records that left the log before the stream read them: history rows `lost`, from where to where."""
        now = time.time()

        def record(db) -> None:
            for lost in losses:
                db.execute("INSERT INTO offset_history (stream, changed_at, topic, partition, previous_offset, "
                           "offset, status, message, change_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           (name, now, lost.topic, lost.partition, lost.from_offset, lost.to_offset,
                            ChangeStatus.LOST.value, lost.describe(), self._new_change_id(db)))
        self._transaction(record)

    def lost_totals(self, name: str) -> tuple[int, int]:
        """(records lost, of those not acknowledged) over the stream's `lost` history rows."""
        [(total, unseen)] = self._read(
            "SELECT COALESCE(SUM(offset - previous_offset), 0), COALESCE(SUM(CASE WHEN id > COALESCE((SELECT up_to "
            "FROM loss_acknowledged WHERE stream = ?), 0) THEN offset - previous_offset ELSE 0 END), 0) "
            "FROM offset_history WHERE stream = ? AND status = ?", (name, name, ChangeStatus.LOST.value))
        return total, unseen

    def lost_per_partition(self, name: str) -> dict[PartitionKey, int]:
        rows = self._read("SELECT topic, partition, SUM(offset - previous_offset) FROM offset_history WHERE "
                          "stream = ? AND status = ? GROUP BY topic, partition ORDER BY topic, partition",
                          (name, ChangeStatus.LOST.value))
        return {PartitionKey(topic, partition): count for topic, partition, count in rows}

    def acknowledge_loss(self, name: str) -> int:
        """Mark every `lost` row so far as seen; how many records that acknowledged."""
        def acknowledge(db) -> int:
            up_to = db.execute("SELECT COALESCE(MAX(id), 0) FROM offset_history WHERE stream = ? AND status = ?",
                               (name, ChangeStatus.LOST.value)).fetchone()[0]
            before = db.execute("SELECT COALESCE((SELECT up_to FROM loss_acknowledged WHERE stream = ?), 0)",
                                (name,)).fetchone()[0]
            count = db.execute("SELECT COALESCE(SUM(offset - previous_offset), 0) FROM offset_history WHERE "
                               "stream = ? AND status = ? AND id > ?",
                               (name, ChangeStatus.LOST.value, before)).fetchone()[0]
            db.execute("INSERT INTO loss_acknowledged (stream, up_to) VALUES (?, ?) ON CONFLICT(stream) DO UPDATE "
                       "SET up_to = excluded.up_to", (name, max(up_to, before)))
            return count
        return self._transaction(acknowledge)

    def history(self, name: str, limit: int | None = None) -> list[HistoryEntry]:
        sql = _HISTORY_ROWS + " ORDER BY id DESC"
        rows = self._read(sql + (" LIMIT ?" if limit else ""), (name, limit) if limit else (name,))
        return [_history_row(row) for row in rows]

    def history_change(self, name: str, change_id: int) -> list[HistoryEntry]:
        """The rows of one change (one call) in the stream's history, by topic and partition."""
        rows = self._read(_HISTORY_ROWS + " AND change_id = ? ORDER BY topic, partition", (name, change_id))
        return [_history_row(row) for row in rows]

    def status_counts(self, name: str) -> dict[ChangeStatus, int]:
        """How many history rows of each status the stream has (e.g. messages skipped)."""
        rows = self._read("SELECT status, COUNT(*) FROM offset_history WHERE stream = ? GROUP BY status", (name,))
        return {ChangeStatus(status): count for status, count in rows}


@dataclass(frozen=True)
class PlannedRow:
    """One partition of a change set as planned: where it goes, from where, and what the history will say."""
    topic: str
    partition: int
    offset: int
    previous_offset: int | None
    clamped: bool
    message: str
    onward: bool = False   # never a move back (ResolvedOffset.onward)


def _config_json(config: StreamConfig) -> str:
    data = asdict(config)
    data["topics"] = list(config.topics)
    return json.dumps(data)


def _next_change_id(db) -> int:
    """Change ids grow over history and pending rows alike (a row of an older state file kept its id)."""
    return 1 + max(db.execute("SELECT COALESCE(MAX(change_id), 0) FROM offset_history").fetchone()[0],
                   db.execute("SELECT COALESCE(MAX(change_id), 0) FROM pending_changes").fetchone()[0])


ENDED_CANCELLED = "cancelled"     # pending_changes.ended: a cancel ended it (the gate may not have heard yet)
ENDED_SUPERSEDED = "superseded"   # a revert of its change ended it (recorded as superseded in the history)


def _end_superseded(db, name: str, now: float, where: str = "", args: tuple = ()) -> None:
    """The rows a revert ended become `superseded` history rows of their change, and go."""
    rows = db.execute("SELECT topic, partition, previous_offset, offset, note, reason, change_id FROM pending_changes "
                      "WHERE stream = ? AND ended = ?" + where, (name, ENDED_SUPERSEDED, *args)).fetchall()
    for topic, partition, previous, offset, note, reason, change_id in rows:
        db.execute("INSERT INTO offset_history (stream, changed_at, topic, partition, previous_offset, offset, "
                   "status, message, change_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (name, now, topic, partition, previous, offset, ChangeStatus.SUPERSEDED.value,
                    "; ".join(m for m in (note, f"not applied: {reason}") if m), change_id))
        db.execute("DELETE FROM pending_changes WHERE stream = ? AND topic = ? AND partition = ? AND change_id = ?",
                   (name, topic, partition, change_id))


_PENDING_ROWS = ("SELECT topic, partition, offset, requested_at, previous_offset, note, reason, change_id, onward "
                 "FROM pending_changes WHERE stream = ? AND ended IS NULL")
_LATEST_PENDING = _PENDING_ROWS + (" AND change_id = (SELECT MAX(change_id) FROM pending_changes AS later WHERE "
                                   "later.stream = ? AND later.topic = pending_changes.topic AND "
                                   "later.partition = pending_changes.partition AND later.ended IS NULL)")
_PENDING_ORDER = " ORDER BY topic, partition"


def _pending_row(row: tuple) -> PendingOffset:
    topic, partition, offset, requested_at, previous, note, reason, change_id, onward = row
    return PendingOffset(topic=topic, partition=partition, offset=offset,
                         requested_at=datetime.fromtimestamp(requested_at, tz=UTC), previous_offset=previous,
                         message=note or None, change_id=change_id, reason=reason, onward=bool(onward))


_HISTORY_ROWS = ("SELECT changed_at, topic, partition, previous_offset, offset, status, message, change_id "
                 "FROM offset_history WHERE stream = ?")


def _history_row(row: tuple) -> HistoryEntry:
    at, topic, partition, previous, offset, status, message, change_id = row
    return HistoryEntry(changed_at=datetime.fromtimestamp(at, tz=UTC), topic=topic, partition=partition,
                        previous_offset=previous, offset=offset,
                        status=ChangeStatus(status), message=message, change_id=change_id)


def _stored_config(name: str, text: str) -> StreamConfig:
    """A stream's config read back; one today's allowlists refuse (a planted row, a narrowed allowlist) is a
    ConfigError naming the stream, so the operator knows which one to fix or drop."""
    try:
        return StreamConfig(**json.loads(text))
    except ConfigError as exc:
        raise ConfigError(f"stream {name!r} in the state store: {exc}") from None


def stored_config(state_dir: str | os.PathLike, name: str) -> StreamConfig:
    """A stream's configuration, secrets included, read from a state directory without hosting it.

    For jobs that replay a stream's topics next to the host that runs it (the
    Spark backfill); the host's API never hands out secrets.
    """
    if not (Path(state_dir) / STATE_FILE).is_file():
        raise StreamNotFound(f"state_dir: no mgstreams state in {str(state_dir)!r}")
    store = StateStore(state_dir)
    try:
        for config, *_ in store.load_streams():
            if config.name == name:
                return config
    finally:
        store.close()
    raise StreamNotFound(f"name: no stream named {name!r} in {str(state_dir)!r}")
