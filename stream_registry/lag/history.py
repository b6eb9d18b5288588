"""The lag sampler's totals kept in the state directory (`lag-history.sqlite`), so a host started again shows
the hour before it on its charts instead of starting them empty. One row per stream and round; rows older than
the collector keeps are deleted as new ones come. The file is the host's own (the state directory is private)."""
from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

from ..model import LagPoint, Verdict

FILE_NAME = "lag-history.sqlite"


class LagHistory:
    """Append and read back a stream's LagPoints; safe from the sampler's thread and the readers'."""

    def __init__(self, state_dir: str | Path):
        self._db = sqlite3.connect(str(Path(state_dir) / FILE_NAME), check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS points (stream TEXT NOT NULL, at REAL NOT NULL, "
                             "total_lag INTEGER NOT NULL, max_lag_seconds REAL, records_per_second REAL NOT NULL, "
                             "status TEXT NOT NULL, committed INTEGER NOT NULL)")
            self._db.execute("CREATE INDEX IF NOT EXISTS points_by_stream ON points (stream, at)")
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(points)")}
            if "partitions" not in columns:   # a file of a host before the per-partition lines
                self._db.execute("ALTER TABLE points ADD COLUMN partitions TEXT NOT NULL DEFAULT '[]'")

    def append(self, stream: str, point: LagPoint, keep_after: float) -> None:
        with self._lock:
            self._db.execute("INSERT INTO points (stream, at, total_lag, max_lag_seconds, records_per_second, status, "
                             "committed, partitions) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                             (stream, point.at, point.total_lag, point.max_lag_seconds, point.records_per_second,
                              point.status.value, point.committed, json.dumps(point.partitions)))
            self._db.execute("DELETE FROM points WHERE stream = ? AND at < ?", (stream, keep_after))

    def load(self, stream: str, since: float) -> list[LagPoint]:
        """The stream's points from `since` on, oldest first."""
        with self._lock:
            rows = self._db.execute("SELECT at, total_lag, max_lag_seconds, records_per_second, status, committed, "
                                    "partitions FROM points WHERE stream = ? AND at >= ? ORDER BY at", (stream, since)).fetchall()
        return [LagPoint(at=at, total_lag=total, max_lag_seconds=seconds, records_per_second=rate,
                         status=Verdict(status), committed=committed,
                         partitions=tuple((topic, partition, lag) for topic, partition, lag in json.loads(partitions)))
                for at, total, seconds, rate, status, committed, partitions in rows]

    def forget(self, stream: str) -> None:
        """A dropped stream's rows (a stream created again under its name starts with empty charts)."""
        with self._lock:
            self._db.execute("DELETE FROM points WHERE stream = ?", (stream,))

    def close(self) -> None:
        with self._lock:
            self._db.close()
