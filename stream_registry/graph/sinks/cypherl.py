"""`cypherl:///abs/path/file.cypherl[?fsync=true]`: appends one rendered statement per line (`mgconsole < file`
imports it), each batch framed so that it is whole or absent after any kill (cypherl_frames).

Missing directories are created 0750, the file 0640. A file admitted by an OutputPolicy (policy.py) is opened
beneath its allowed directory, following no symlink on the way.

The compare-and-set of an exactly-once batch is made against the file as it is before each append, never a
remembered copy: the sink keeps what it last saw of the file (device and inode, size, last frame line) and, under
the file's lock, checks it before every append. A file cut back, truncated, appended to or replaced in place by
someone else, or replaced or rotated at its path (a new inode, or none), is read again (and cut back to its last
whole batch, reopened at its path when replaced), so the batch's `expect` is compared with what the file holds
now: a StoredOffsetsConflict saying what happened to the file, on which the stream realigns to the file.

Durability: a batch is rendered whole, then appended with one write (its frame included), and its offsets are
committed after write() returns. Without `fsync` (the default) the batch is then in the kernel's page cache:
it survives the stream process or the host being killed (at-least-once holds across any process crash), but
not the machine losing power or the kernel crashing before the cache is written back (Linux: within about 30 s,
vm.dirty_expire_centisecs): batches whose offsets were already committed can be lost then (a torn one is cut
back by its frame on the next open), neither in the file nor delivered again. With `?fsync=true` each batch is
on disk before write() returns, so before its offsets are committed: at-least-once across power loss too, for
an fsync per batch (a few milliseconds on a disk).
"""
from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from ...errors import ConfigError, SinkError, StoredOffsetsConflict
from ...model import PartitionKey
from ...safe_paths import open_beneath
from .. import cypherl_frames
from ..cypher_literals import render_statement
from ..cypher_rows import render_text
from ..offset_store import Continuation, continuation, offsets_in_statements
from ..statement import Statement, Statements
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
        self._beneath = beneath
        self._lock = threading.Lock()
        # Per stream: its stored offsets as read from the file, valid while the file is as `_seen` says.
        self._known: dict[str, dict[PartitionKey, int]] = {}
        self._seen: _Seen | None = None    # the file as this sink last read or wrote it
        self._fd: int | None = None
        self._fd = self._open()
        try:
            with _FileLock(self._fd):
                self.trimmed = self._recover(self._fd)
        except OSError as exc:
            self.close()
            raise SinkError(f"sink cypherl://{path}: cannot recover the file's last whole batch: {exc}",
                            transient=True) from None

    def _open(self) -> int:
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT   # read too: the sink reads its own tail (cypherl_frames)
        try:
            if self._beneath is None:
                _make_dirs(os.path.dirname(self.path))
                return os.open(self.path, flags, FILE_MODE)
            # no symlink at any component below the allowed directory, whatever was swapped since
            _make_dirs(self._beneath)
            return open_beneath(self._beneath, os.path.relpath(self.path, self._beneath), flags, FILE_MODE,
                                dir_mode=DIR_MODE, make_dirs=True)
        except (OSError, ValueError) as exc:
            raise SinkError(f"sink cypherl://{self.path}: cannot open for appending: {exc}") from None

    def _recover(self, fd: int) -> int:
        """Cut the file back to its last whole batch (the file's lock held); a file without frames (written
        before them) keeps its whole lines and gets an empty frame, so that what follows is framed. The bytes
        cut."""
        size = os.fstat(fd).st_size
        end = cypherl_frames.verified_end(fd, size)
        if end is None:
            end = _after_last_newline(fd, size)
            os.ftruncate(fd, end)
            _write_all(fd, [cypherl_frames.EMPTY_FRAME])
        elif end < size:
            os.ftruncate(fd, end)
        if self.fsync and (size > end or end == 0):
            os.fsync(fd)
        self._known, self._seen, self._replaced = {}, _Seen.at_end(fd, os.fstat(fd).st_size), False
        return size - end

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
            fd = self._current_fd("write")
            with _FileLock(fd):
                try:
                    known, changed = self._stored_of(fd, {stream for stream, _, _ in end})
                except OSError as exc:
                    raise SinkError(f"sink cypherl://{self.path}: reading the stored offsets failed: {exc}",
                                    transient=True) from None
                try:
                    if end and continuation(known, end, expect) is Continuation.DONE:
                        return Written.ALREADY_APPLIED
                except StoredOffsetsConflict as exc:
                    if changed is None:
                        raise
                    raise StoredOffsetsConflict(f"sink cypherl://{self.path}: {changed}; {exc}",
                                                stored=exc.stored, expected=exc.expected) from None
                after = {**known, **end}
                frame = cypherl_frames.frame_line(data, after)
                size = os.fstat(fd).st_size
                try:
                    _write_all(fd, [data, frame])
                    if self.fsync:
                        os.fsync(fd)
                except OSError as exc:
                    _cut_back(fd, size)
                    self._seen = None
                    raise SinkError(f"sink cypherl://{self.path}: writing a batch of {len(statements)} "
                                    f"statements failed: {exc}", transient=True) from None
                self._seen = _Seen.of(fd, size + len(data) + len(frame), frame)
            for (stream, topic, partition), offset in end.items():
                self._known[stream][PartitionKey(topic, partition)] = offset
            self.statements += len(statements)
        return Written.APPLIED

    def _current_fd(self, doing: str) -> int:
        """The open file, reopened at its path when someone replaced or rotated it (self._lock held)."""
        fd = self._fd
        if fd is None:
            raise SinkError(f"sink cypherl://{self.path}: {doing} after close")
        try:
            at_path = os.stat(self.path, follow_symlinks=False)
            held = os.fstat(fd)
            moved = (at_path.st_dev, at_path.st_ino) != (held.st_dev, held.st_ino)
        except FileNotFoundError:
            moved = True
        except OSError as exc:
            raise SinkError(f"sink cypherl://{self.path}: cannot look at the file: {exc}", transient=True) from None
        if not moved:
            return fd
        new = self._open()
        os.close(fd)
        self._fd = new
        self._known, self._seen, self._replaced = {}, None, True
        return new

    _replaced = False   # the file at the path was replaced or rotated since this sink last read it

    def _stored_of(self, fd: int, streams: set[str]) -> tuple[dict[tuple[str, str, int], int], str | None]:
        """The stored offsets of `streams` in the file as it is now, by (stream, tp), and what someone else did to
        the file since this sink last saw it (None: nothing). Kept in memory only while the file's identity,
        size and last frame line are those this sink last saw (the file's lock held)."""
        size = os.fstat(fd).st_size
        changed = None
        if self._replaced:
            changed = "the file was replaced or rotated at its path by someone else: read again from the new file"
        elif self._seen is not None and not self._seen.matches(fd, size):
            changed = (f"the file was changed by someone else (this sink left it at {self._seen.size} bytes, it "
                       f"has {size}: cut, truncated, appended to or rewritten): read again")
        if changed is not None or self._seen is None:
            self._recover(fd)
            size = os.fstat(fd).st_size
        out = {}
        for stream in streams:
            if stream not in self._known:
                self._known[stream] = cypherl_frames.stored_offsets(fd, size, stream)
            out.update({(stream, t, p): o for (t, p), o in self._known[stream].items()})
        return out, changed

    def _render(self, statements: Sequence[Statement]) -> bytes:
        """The batch's lines, each run of one query rendered in bulk (render_text)."""
        texts: list[str] = []
        before = 0   # statements of the runs before this one
        for query, rows in Statements.of(statements).runs:
            try:
                texts.append(render_text(query, rows))
            except SinkError:   # which statement: rendered one by one to name it
                self._render_each(query, rows, before)
                raise
            before += len(rows)
        try:
            return "".join(texts).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise SinkError(f"sink cypherl://{self.path}: a query holds text that is not valid Unicode "
                            f"({exc.reason})", rejected=True) from None

    def _render_each(self, query: str, rows: Sequence[Mapping[str, Any]], first: int) -> None:
        for index, parameters in enumerate(rows, first):
            try:
                render_statement(query, parameters)
            except SinkError as exc:
                raise SinkError(f"sink cypherl://{self.path}: statement {index} of the batch: {exc}",
                                rejected=True) from None

    def stored_offsets(self, stream: str, partitions: Iterable[PartitionKey] | None = None
                       ) -> dict[PartitionKey, int]:
        """The file's last frame naming `stream`, as the file is now (see _stored_of)."""
        with self._lock:
            fd = self._current_fd("read")
            try:
                with _FileLock(fd):
                    known, _ = self._stored_of(fd, {stream})
            except OSError as exc:
                raise SinkError(f"sink cypherl://{self.path}: reading the stored offsets failed: {exc}",
                                transient=True) from None
        wanted = set(partitions) if partitions is not None else None
        return {PartitionKey(t, p): o for (_, t, p), o in known.items() if wanted is None or (t, p) in wanted}

    def stored_marks(self, stream: str, partitions: Iterable[PartitionKey] | None = None
                     ) -> dict[PartitionKey, str]:
        """The change marks near the file's end (cypherl_frames.marks_in_cypherl)."""
        with self._lock:
            fd = self._current_fd("read")
            try:
                with _FileLock(fd):
                    return cypherl_frames.marks_in_cypherl(fd, os.fstat(fd).st_size, stream, partitions)
            except OSError as exc:
                raise SinkError(f"sink cypherl://{self.path}: reading the stored change marks failed: {exc}",
                                transient=True) from None

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __repr__(self) -> str:
        return f"CypherlSink({self.path!r}, fsync={self.fsync})"



@dataclass(frozen=True)
class _Seen:
    """The file as a sink last saw it: which file, how long, and its last line (a frame, ending at `size`)."""
    device: int
    inode: int
    size: int
    tail: bytes

    @classmethod
    def of(cls, fd: int, size: int, tail: bytes) -> _Seen:
        held = os.fstat(fd)
        return cls(held.st_dev, held.st_ino, size, tail)

    @classmethod
    def at_end(cls, fd: int, size: int) -> _Seen:
        frame = cypherl_frames.last_frame(fd, size)
        tail = os.pread(fd, frame.end - frame.start, frame.start) if frame is not None and frame.end == size else b""
        return cls.of(fd, size, tail)

    def matches(self, fd: int, size: int) -> bool:
        held = os.fstat(fd)
        return (held.st_dev, held.st_ino, size) == (self.device, self.inode, self.size) and \
            os.pread(fd, len(self.tail), size - len(self.tail)) == self.tail


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

