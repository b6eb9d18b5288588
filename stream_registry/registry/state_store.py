"""The registry's durable state: one SQLite file per state directory.

SQLite gives atomic writes (a transaction per change) and lets other processes
(the CLI, a Spark driver) read the same file. The file is created 0600: it holds
credentials.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from ..config import StreamConfig
from ..errors import StreamError
from ..offset_spec import ChangeStatus
from ..offsets import HistoryEntry, PendingOffset
from ..stream_info import StreamStatus

STATE_FILE = "mgstreams.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS streams (
    name TEXT PRIMARY KEY,
    config TEXT NOT NULL,
    desired_running INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL,
    error TEXT
);
CREATE TABLE IF NOT EXISTS pending_offsets (
    stream TEXT NOT NULL,
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    requested_at REAL NOT NULL,
    clamped INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (stream, topic, partition)
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
"""


class StateStore:
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
            self._add_column("pending_offsets", "clamped", "INTEGER NOT NULL DEFAULT 0")
            self._add_column("offset_history", "message", "TEXT")
            self._add_column("pending_offsets", "previous_offset", "INTEGER")
            self._add_column("pending_offsets", "note", "TEXT")
        except (OSError, sqlite3.Error) as exc:
            raise StreamError(f"state_dir: cannot use {str(state_dir)!r}: {exc}") from None
        self._lock = threading.Lock()

    def _add_column(self, table: str, column: str, definition: str) -> None:
        """Bring a state file written by an older version up to date."""
        if column not in [row[1] for row in self._db.execute(f"PRAGMA table_info({table})")]:
            self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

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
                if self._db.in_transaction:  # a BEGIN that failed (database busy) left nothing to undo
                    try:
                        self._db.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                raise StreamError(f"state: cannot write {self.path}: {exc}") from None

    def _read(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # -- streams ----------------------------------------------------------
    def load_streams(self) -> list[tuple[StreamConfig, bool, StreamStatus, str | None]]:
        rows = self._read("SELECT config, desired_running, status, error FROM streams ORDER BY name")
        return [(StreamConfig(**json.loads(cfg)), bool(desired), StreamStatus(status), error)
                for cfg, desired, status, error in rows]

    def insert_stream(self, config: StreamConfig) -> None:
        data = asdict(config)
        data["topics"] = list(config.topics)
        self._write(("INSERT INTO streams (name, config, desired_running, status) VALUES (?, ?, 0, ?)",
                     (config.name, json.dumps(data), StreamStatus.CREATED.value)))

    def set_status(self, name: str, status: StreamStatus, error: str | None = None,
                   desired_running: bool | None = None) -> None:
        if desired_running is None:
            self._write(("UPDATE streams SET status = ?, error = ? WHERE name = ?", (status.value, error, name)))
        else:
            self._write(("UPDATE streams SET status = ?, error = ?, desired_running = ? WHERE name = ?",
                         (status.value, error, int(desired_running), name)))

    def delete_stream(self, name: str) -> None:
        self._write(("DELETE FROM streams WHERE name = ?", (name,)),
                    ("DELETE FROM pending_offsets WHERE stream = ?", (name,)),
                    ("DELETE FROM offset_history WHERE stream = ?", (name,)))

    # -- offsets ----------------------------------------------------------
    def set_pending(self, name: str, offsets: dict[tuple[str, int], int],
                    clamped: set[tuple[str, int]] = frozenset(),
                    previous: dict[tuple[str, int], int | None] | None = None,
                    notes: dict[tuple[str, int], str] | None = None) -> None:
        """Offsets waiting to be applied; `clamped` ones were moved into the log's range when planned;
        `previous`: where each partition stood then; `notes`: the history message once applied."""
        now = time.time()
        previous, notes = previous or {}, notes or {}
        self._write(*[("INSERT OR REPLACE INTO pending_offsets (stream, topic, partition, offset, requested_at, "
                       "clamped, previous_offset, note) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       (name, topic, partition, offset, now, int((topic, partition) in clamped),
                        previous.get((topic, partition)), notes.get((topic, partition))))
                      for (topic, partition), offset in offsets.items()])

    def pending(self, name: str) -> dict[tuple[str, int], int]:
        rows = self._read("SELECT topic, partition, offset FROM pending_offsets WHERE stream = ?", (name,))
        return {(topic, partition): offset for topic, partition, offset in rows}

    def pending_rows(self, name: str) -> list[PendingOffset]:
        return [_pending_row(row) for row in self._read(_PENDING_ROWS, (name,))]

    def take_pending(self, name: str) -> list[PendingOffset]:
        """Remove every pending offset of the stream, in one transaction; the rows removed."""
        def take(db):
            rows = db.execute(_PENDING_ROWS, (name,)).fetchall()
            db.execute("DELETE FROM pending_offsets WHERE stream = ?", (name,))
            return rows
        return [_pending_row(row) for row in self._transaction(take)]

    def pending_clamped(self, name: str) -> set[tuple[str, int]]:
        rows = self._read("SELECT topic, partition FROM pending_offsets WHERE stream = ? AND clamped = 1", (name,))
        return {(topic, partition) for topic, partition in rows}

    def record_applied(self, name: str, changes: list[tuple[str, int, int | None, int, ChangeStatus, str | None]],
                       pending_done: dict[tuple[str, int], int] | None = None) -> None:
        """Append history rows (topic, partition, previous, offset, status, message) and clear the
        pending entries the applied changes fulfilled."""
        now = time.time()
        statements = [("INSERT INTO offset_history (stream, changed_at, topic, partition, previous_offset, "
                       "offset, status, message) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       (name, now, topic, partition, previous, offset, status.value, message))
                      for topic, partition, previous, offset, status, message in changes]
        for (topic, partition), offset in (pending_done or {}).items():
            statements.append(("DELETE FROM pending_offsets WHERE stream = ? AND topic = ? AND partition = ? "
                               "AND offset = ?", (name, topic, partition, offset)))
        if statements:
            self._write(*statements)

    def history(self, name: str, limit: int | None = None) -> list[HistoryEntry]:
        sql = _HISTORY_ROWS + " ORDER BY id DESC"
        rows = self._read(sql + (" LIMIT ?" if limit else ""), (name, limit) if limit else (name,))
        return [_history_row(row) for row in rows]

    def history_entry(self, name: str, change_id: int) -> HistoryEntry | None:
        """One row of the stream's history by its change id; None when the stream has no such row."""
        rows = self._read(_HISTORY_ROWS + " AND id = ?", (name, change_id))
        return _history_row(rows[0]) if rows else None

    def status_counts(self, name: str) -> dict[ChangeStatus, int]:
        """How many history rows of each status the stream has (e.g. messages skipped)."""
        rows = self._read("SELECT status, COUNT(*) FROM offset_history WHERE stream = ? GROUP BY status", (name,))
        return {ChangeStatus(status): count for status, count in rows}


_PENDING_ROWS = ("SELECT topic, partition, offset, requested_at, previous_offset, note FROM pending_offsets "
                 "WHERE stream = ? ORDER BY topic, partition")


def _pending_row(row: tuple) -> PendingOffset:
    topic, partition, offset, requested_at, previous, note = row
    return PendingOffset(topic, partition, offset, datetime.fromtimestamp(requested_at, tz=timezone.utc), previous,
                         note)


_HISTORY_ROWS = ("SELECT changed_at, topic, partition, previous_offset, offset, status, message, id "
                 "FROM offset_history WHERE stream = ?")


def _history_row(row: tuple) -> HistoryEntry:
    at, topic, partition, previous, offset, status, message, change_id = row
    return HistoryEntry(datetime.fromtimestamp(at, tz=timezone.utc), topic, partition, previous, offset,
                        ChangeStatus(status), message, change_id)
