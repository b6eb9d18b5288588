"""`cypherl:///abs/path/file.cypherl[?fsync=true]`: appends one rendered statement per line (`mgconsole < file`
imports it), each batch framed so that it is whole or absent after any kill (cypherl_frames).

Missing directories are created 0750, the file 0640. A file admitted by an OutputPolicy (policy.py) is opened
beneath its allowed directory, following no symlink on the way.
"""
from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from ...errors import ConfigError, SinkError
from ...model import PartitionKey
from ...safe_paths import open_beneath
from .. import cypherl_frames
from ..cypher_literals import render_statement
from ..offset_store import Continuation, continuation, offsets_in_statements
from ..statement import Statement
from .protocol import Closing, Written
from .uri import check_options, flag, shown_uri

FILE_MODE = 0o640
DIR_MODE = 0o750


@dataclass(frozen=True)
class CypherlSettings:
    path: str
    fsync: bool = False
    climbs: bool = False                 # the URI's path had a '..' segment (normalised away in `path`)
    admitted_under: str | None = None    # set by an OutputPolicy: the allowed directory the file lies under


class CypherlSink(Closing):
    """Appends batches to a .cypherl file, one rendered statement per line, each batch framed
    (cypherl_frames): whole or absent after any kill.

    Opening the file cuts it back to the end of its last whole batch (a batch
    torn by a kill, a torn line included), under an exclusive lock, before
    anything is written. A batch is rendered completely, then written with its
    frame in one append under the same lock; a write that fails part-way is
    cut back. With `fsync`, each batch (and each cut) is on disk before
    write() returns, so before its offsets are committed.
    """

    def __init__(self, path: str, *, fsync: bool = False, beneath: str | None = None):
        self.path = path
        self.fsync = fsync
        self.statements = 0
        self.trimmed = 0     # bytes cut from the end on open: a batch a kill left unfinished
        self._lock = threading.Lock()
        self._known: dict[str, dict[PartitionKey, int]] = {}   # per stream: its stored offsets, as in the file
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT   # read too: the sink reads its own tail (cypherl_frames)
        try:
            if beneath is None:
                _make_dirs(os.path.dirname(path))
                fd = os.open(path, flags, FILE_MODE)
            else:   # no symlink at any component below the allowed directory, whatever was swapped since
                _make_dirs(beneath)
                fd = open_beneath(beneath, os.path.relpath(path, beneath), flags, FILE_MODE,
                                  dir_mode=DIR_MODE, make_dirs=True)
        except (OSError, ValueError) as exc:
            raise SinkError(f"sink cypherl://{path}: cannot open for appending: {exc}") from None
        self._fd: int | None = fd
        try:
            self._recover(fd)
        except OSError as exc:
            self.close()
            raise SinkError(f"sink cypherl://{path}: cannot recover the file's last whole batch: {exc}",
                            transient=True) from None

    def _recover(self, fd: int) -> None:
        """Cut the file back to its last whole batch; a file without frames (written before them) keeps its
        whole lines and gets an empty frame, so that what follows is framed."""
        with _FileLock(fd):
            size = os.fstat(fd).st_size
            end = cypherl_frames.verified_end(fd, size)
            if end is None:
                end = _after_last_newline(fd, size)
                os.ftruncate(fd, end)
                _write_all(fd, [cypherl_frames.EMPTY_FRAME])
            elif end < size:
                os.ftruncate(fd, end)
            self.trimmed = size - end
            if self.fsync and (self.trimmed or end == 0):
                os.fsync(fd)

    def write(self, statements: Sequence[Statement], *, expect: Mapping[PartitionKey, int | None] | None = None
              ) -> Written:
        """Append one batch. An exactly-once batch (ending in offset statements) whose end offsets the file
        already stores is not written again (ALREADY_APPLIED); with `expect`, the offsets it continues from
        are checked first (offset_store.continuation, StoredOffsetsConflict)."""
        if not statements:
            return Written.APPLIED
        end = offsets_in_statements(statements)
        data = self._render(statements)
        with self._lock:
            fd = self._fd
            if fd is None:
                raise SinkError(f"sink cypherl://{self.path}: write after close")
            with _FileLock(fd):
                known = self._stored_of(fd, {stream for stream, _, _ in end})
                if end and continuation(known, end, expect) is Continuation.DONE:
                    return Written.ALREADY_APPLIED
                after = {**known, **end}
                frame = cypherl_frames.frame_line(data, after)
                size = os.fstat(fd).st_size
                try:
                    _write_all(fd, [data, frame])
                    if self.fsync:
                        os.fsync(fd)
                except OSError as exc:
                    _cut_back(fd, size)
                    raise SinkError(f"sink cypherl://{self.path}: writing a batch of {len(statements)} "
                                    f"statements failed: {exc}", transient=True) from None
            for (stream, topic, partition), offset in end.items():
                self._known[stream][PartitionKey(topic, partition)] = offset
            self.statements += len(statements)
        return Written.APPLIED

    def _stored_of(self, fd: int, streams: set[str]) -> dict[tuple[str, str, int], int]:
        """The stored offsets of `streams` (read from the file once, then kept as written), by (stream, tp)."""
        out = {}
        for stream in streams:
            if stream not in self._known:
                self._known[stream] = cypherl_frames.stored_offsets(fd, os.fstat(fd).st_size, stream)
            out.update({(stream, t, p): o for (t, p), o in self._known[stream].items()})
        return out

    def _render(self, statements: Sequence[Statement]) -> bytes:
        lines = []
        for index, statement in enumerate(statements):
            try:
                lines.append(render_statement(statement.query, statement.parameters))
            except SinkError as exc:
                raise SinkError(f"sink cypherl://{self.path}: statement {index} of the batch: {exc}",
                                rejected=True) from None
        lines.append("")
        try:
            return "\n".join(lines).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise SinkError(f"sink cypherl://{self.path}: a query holds text that is not valid Unicode "
                            f"({exc.reason})", rejected=True) from None

    def stored_offsets(self, stream: str, partitions: Iterable[PartitionKey] | None = None
                       ) -> dict[PartitionKey, int]:
        """From memory once read: the file's last frame naming `stream`, then what this sink wrote."""
        with self._lock:
            fd = self._fd
            if fd is None:
                raise SinkError(f"sink cypherl://{self.path}: read after close")
            try:
                known = self._stored_of(fd, {stream})
            except OSError as exc:
                raise SinkError(f"sink cypherl://{self.path}: reading the stored offsets failed: {exc}",
                                transient=True) from None
        wanted = set(partitions) if partitions is not None else None
        return {PartitionKey(t, p): o for (_, t, p), o in known.items() if wanted is None or (t, p) in wanted}

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __repr__(self) -> str:
        return f"CypherlSink({self.path!r}, fsync={self.fsync})"



class _FileLock:
    """An exclusive flock on the file while a batch is written or a torn one cut: another sink on the same file
    (another process) never cuts a batch that is being written."""

    def __init__(self, fd: int):
        self._fd = fd

    def __enter__(self) -> _FileLock:
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc_info) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)


def _cut_back(fd: int, size: int) -> None:
    try:
        os.ftruncate(fd, size)
    except OSError:
        pass


def _write_all(fd: int, buffers: list[bytes]) -> None:
    """Append `buffers` with as few system calls as the kernel allows (one, usually)."""
    views = [memoryview(b) for b in buffers if b]
    while views:
        written = os.writev(fd, views)
        while views and written >= len(views[0]):
            written -= len(views[0])
            views.pop(0)
        if views and written:
            views[0] = views[0][written:]


def _after_last_newline(fd: int, size: int) -> int:
    position = size
    while position > 0:
        start = max(0, position - (1 << 16))
        block = os.pread(fd, position - start, start)
        newline = block.rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        position = start
    return 0


def _make_dirs(directory: str) -> None:
    """Create `directory` and its missing parents, each 0750 (less if the umask says so)."""
    missing = []
    while directory and not os.path.isdir(directory):
        missing.append(directory)
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, DIR_MODE)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise


def parse_cypherl(parts: Any, query: dict[str, str], uri: str) -> CypherlSettings:
    check_options(query, {"fsync"}, uri)
    path = unquote(parts.path)
    if parts.netloc or not path.startswith("/"):
        raise ConfigError(f"sink: {shown_uri(uri)!r} is not an absolute path; relative paths are "
                          f"rejected (write cypherl:///absolute/path/file.cypherl, three slashes)")
    if path.endswith("/") or "\x00" in path:
        raise ConfigError(f"sink: {shown_uri(uri)!r} does not name a file")
    return CypherlSettings(os.path.normpath(path), flag(query, "fsync", uri), climbs=".." in path.split("/"))


def open_cypherl(settings: CypherlSettings, credentials: Mapping[str, str]) -> CypherlSink:
    if settings.admitted_under is None:
        return CypherlSink(settings.path, fsync=settings.fsync)
    # Admitted by an OutputPolicy: opened beneath the allowed directory, following no symlink on the way.
    return CypherlSink(settings.path, fsync=settings.fsync, beneath=settings.admitted_under)

