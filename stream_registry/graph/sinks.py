"""Graph sinks: one interface for every place a batch of statements can go.

A sink is named by a URI, validated when a stream is created (no I/O) and
opened when it starts:

- `cypherl:///abs/path/file.cypherl[?fsync=true]` appends one rendered
  statement per line (`mgconsole < file` imports it), each batch framed so it
  is whole or absent after any kill (cypherl_frames); missing directories are
  created 0750, the file 0640. Given an `OutputPolicy` (the registry always
  gives one: streams are created by any Cypher caller or API client), the file
  must lie under an allowed output directory: `..` and symlinks that lead
  elsewhere are refused. Without one (an operator's command line, such as the
  Spark backfill) it is written wherever the operator says.
- `null://` discards batches and counts them (benchmarks).
- `bolt://host[:7687]` (plain), `bolt+s://…` (TLS; the server certificate is
  verified against the system CAs and the host name, as a browser does) and
  `bolt+ssc://…` (TLS to a self-signed server: any certificate, encryption
  only) write to Memgraph through pymgclient, one transaction per batch,
  retrying transient failures (`?retries=5`). Both TLS schemes take
  `?fingerprint=<hex>` to pin the server key (SHA-512 of the public key, as
  pymgclient reports it). Credentials come from the stream's credentials map,
  keys `bolt.username` and `bolt.password`, never from the URI; the password
  never appears in a repr or an error.

`write(statements, expect=...)` is all or nothing from the caller's view and
raises SinkError on failure (graph.sink_faults says whose fault it is); an
exactly-once batch checks the offsets it continues from in its own
transaction (offset_store.continuation). Add a scheme by adding an entry to
`SCHEMES`.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import re
import socket
import ssl
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from types import MappingProxyType
from typing import Any, Protocol
from urllib.parse import parse_qsl, unquote, urlsplit

from ..errors import ConfigError, SinkError
from ..redaction import MASK, redact
from ..safe_paths import check_private_dir, open_beneath
from . import cypherl_frames
from .cypher_literals import render_statement, text_of_bytes
from .cypherl_frames import offsets_in_cypherl
from .offset_store import READ_QUERY, Continuation, continuation, offsets_in_statements, stored_in_rows
from .sink_faults import is_refusal, is_transient
from .transform import Statement
from .unwind import fold

USERNAME_KEY = "bolt.username"
PASSWORD_KEY = "bolt.password"
DEFAULT_BOLT_PORT = 7687
OUTPUT_DIRS_ENV = "MGSTREAMS_OUTPUT_DIRS"
OUTPUT_SUBDIR = "output"
FILE_MODE = 0o640
DIR_MODE = 0o750
_NO_CREDENTIALS: Mapping[str, str] = MappingProxyType({})


class Sink(Protocol):
    def write(self, statements: Sequence[Statement], *,
              expect: Mapping[tuple[str, int], int | None] | None = None) -> Written:
        """Apply one batch in one transaction; raise SinkError if it was not applied.

        An exactly-once batch ends in offset_statements: one whose end offsets
        are already stored is not applied again (ALREADY_APPLIED). With
        `expect` ((topic, partition) -> the stored offset the batch continues
        from, None for none), the stored offsets are compared with it in the
        batch's own transaction first: StoredOffsetsConflict, nothing written,
        when they differ (offset_store.continuation)."""

    def stored_offsets(self, stream: str, partitions: Iterable[tuple[str, int]] | None = None
                       ) -> dict[tuple[str, int], int]:
        """The offsets an exactly-once stream stored with its batches (offset_store); SinkError if unreadable."""

    def close(self) -> None:
        """Release files and connections; idempotent."""


def validate_sink_uri(uri: str, output: OutputPolicy | None = None) -> None:
    """Raise ConfigError naming field `sink` if `uri` cannot be opened; never connects, never creates.

    With `output`, a file sink must also lie under one of its directories.
    """
    scheme, settings = _parse(uri)
    if output is not None:
        output.admit(settings, uri)


def open_sink(uri: str, credentials: Mapping[str, str] = _NO_CREDENTIALS,
              output: OutputPolicy | None = None, *, bolt_unwind: bool = True) -> Sink:
    """Open the sink `uri` names; with `output`, the checks of validate_sink_uri are made again first
    (the file system may have changed since the stream was created). `bolt_unwind=False`: a Bolt sink
    runs a batch's statements one at a time instead of folding them (unwind.py)."""
    scheme, settings = _parse(uri)
    if output is not None:
        settings = output.admit(settings, uri)
    if isinstance(settings, BoltSettings) and not bolt_unwind:
        settings = replace(settings, unwind=False)
    return SCHEMES[scheme].open(settings, credentials or _NO_CREDENTIALS)


def read_stored_offsets(uri: str, stream: str, credentials: Mapping[str, str] = _NO_CREDENTIALS,
                        output: OutputPolicy | None = None, partitions: Iterable[tuple[str, int]] | None = None
                        ) -> dict[tuple[str, int], int]:
    """A stopped exactly-once stream's stored offsets, read without opening its sink for writing
    (a cypherl file is not created; null:// keeps none once its stream process is gone)."""
    scheme, settings = _parse(uri)
    if output is not None:
        settings = output.admit(settings, uri)
    if isinstance(settings, CypherlSettings):
        try:
            return offsets_in_cypherl(settings.path, stream, partitions)
        except OSError as exc:
            raise SinkError(f"sink cypherl://{settings.path}: reading the stored offsets failed: {exc}") from None
    if scheme == "null":
        return {}
    with SCHEMES[scheme].open(settings, credentials or _NO_CREDENTIALS) as sink:
        return sink.stored_offsets(stream, partitions)


STORED_OFFSETS_DEADLINE_S = 10.0
STORED_OFFSETS_RETRY_S = 0.2


def read_stored_offsets_within(sink: Sink, stream: str, partitions: Iterable[tuple[str, int]] | None = None, *,
                               deadline_s: float = STORED_OFFSETS_DEADLINE_S,
                               retry_s: float = STORED_OFFSETS_RETRY_S,
                               sleep: Callable[[float], None] = time.sleep) -> dict[tuple[str, int], int]:
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


# -- where file sinks may write -----------------------------------------------
@dataclass(frozen=True)
class OutputPolicy:
    """The directories file sinks may write under, for sinks named by untrusted callers.

    `dirs` are real paths (symlinks resolved). The state directory itself is
    never writable through a sink, except for its `output` subdirectory, even
    when an allowed directory contains it.
    """

    dirs: tuple[str, ...]
    state_dir: str | None = None

    @classmethod
    def for_state_dir(cls, state_dir: str | os.PathLike,
                      environ: Mapping[str, str] | None = None) -> OutputPolicy:
        """$MGSTREAMS_OUTPUT_DIRS (separated like PATH) if set, else `<state_dir>/output`."""
        environ = os.environ if environ is None else environ
        configured = [d.strip() for d in environ.get(OUTPUT_DIRS_ENV, "").split(os.pathsep) if d.strip()]
        for directory in configured:
            if not os.path.isabs(directory):
                raise ConfigError(f"{OUTPUT_DIRS_ENV}: {directory!r} is not an absolute path")
            check_private_dir(directory, OUTPUT_DIRS_ENV)   # someone else's directory could be swapped under us
        state = os.path.realpath(os.fspath(state_dir))
        dirs = configured or [os.path.join(state, OUTPUT_SUBDIR)]
        return cls(tuple(os.path.realpath(d) for d in dirs), state)

    def admit(self, settings: Any, uri: str) -> Any:
        """`settings` with the file's real path, or ConfigError naming `sink` and the URI; never creates."""
        if not isinstance(settings, CypherlSettings):
            return settings
        shown = _shown_uri(uri)
        if settings.climbs:
            raise ConfigError(f"sink: {shown!r} contains '..'; name the file directly under an allowed output "
                              f"directory ({self._allowed()})")
        try:
            real = _real_path(settings.path)
        except OSError as exc:   # a component changed kind while it was resolved (a symlink swapped in or out)
            raise ConfigError(f"sink: {shown!r} cannot be resolved: {exc.strerror}") from None
        if not any(_is_within(real, d) for d in self.dirs) or self._in_state_dir(real):
            # where a symlink leads is said only for one inside an allowed directory: elsewhere it would map
            # the host's file system for the caller
            inside = any(_is_within(settings.path, d) for d in self.dirs)
            where = f" (it resolves to {real!r})" if real != settings.path and inside else ""
            raise ConfigError(f"sink: {shown!r} is outside the allowed output directories{where}; "
                              f"streams write files only under {self._allowed()} (set {OUTPUT_DIRS_ENV} "
                              f"on the host to change them)")
        if os.path.lexists(real) and not stat.S_ISREG(os.stat(real).st_mode):
            raise ConfigError(f"sink: {shown!r} exists and is not a regular file")
        return CypherlSettings(real, settings.fsync, admitted_under=self._root_of(real))

    def _in_state_dir(self, real: str) -> bool:
        if self.state_dir is None or not _is_within(real, self.state_dir):
            return False
        return not _is_within(real, os.path.join(self.state_dir, OUTPUT_SUBDIR)) or \
            real == os.path.join(self.state_dir, OUTPUT_SUBDIR)

    def _root_of(self, real: str) -> str:
        return max((d for d in self.dirs if _is_within(real, d)), key=len)

    def _allowed(self) -> str:
        return ", ".join(repr(d) for d in self.dirs)


def _real_path(path: str) -> str:
    """The real path of `path`: its deepest existing ancestor resolved (symlinks followed), the rest appended.

    A symlink anywhere on the way, dangling or not, is followed to where it
    leads, so it cannot carry a write outside the directory it sits in.
    """
    return os.path.realpath(path)


def _is_within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


# -- URIs -------------------------------------------------------------------
@dataclass(frozen=True)
class Scheme:
    """How to check a URI of one scheme (pure) and how to open it."""

    parse: Callable[[Any, dict[str, str], str], Any]
    open: Callable[[Any, Mapping[str, str]], Sink]


def _parse(uri: str) -> tuple[str, Any]:
    if not isinstance(uri, str) or "://" not in uri:
        raise ConfigError(f"sink: expected a URI like cypherl:///abs/file.cypherl, bolt://host:port or "
                          f"null://, got {_shown_uri(uri)!r}")
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ConfigError(f"sink: unknown scheme {scheme!r} in {_shown_uri(uri)!r} "
                          f"(known: {', '.join(sorted(SCHEMES))})")
    if parts.username is not None or parts.password is not None:
        raise ConfigError(f"sink: {_shown_uri(uri)!r} carries credentials; pass them as credentials "
                          f"{USERNAME_KEY!r} and {PASSWORD_KEY!r} instead")
    if parts.fragment:
        raise ConfigError(f"sink: {_shown_uri(uri)!r} has a fragment, which no sink understands")
    try:
        query = dict(parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query)))
    except ValueError:
        raise ConfigError(f"sink: malformed query string in {_shown_uri(uri)!r}") from None
    return scheme, SCHEMES[scheme].parse(parts, query, uri)


def _shown_uri(uri: Any) -> Any:
    """The URI with any user:password part masked, for messages."""
    if not isinstance(uri, str):
        return uri
    return re.sub(r"(://)[^/@?#]*@", rf"\1{MASK}@", uri)


def _options(query: dict[str, str], allowed: set[str], uri: str) -> None:
    unknown = sorted(set(query) - allowed)
    if unknown:
        raise ConfigError(f"sink: unknown option {unknown[0]!r} in {_shown_uri(uri)!r} "
                          f"(allowed: {sorted(allowed) or 'none'})")


def _flag(query: dict[str, str], name: str, uri: str) -> bool:
    value = query.get(name, "false").lower()
    if value not in ("true", "false", "1", "0", "yes", "no"):
        raise ConfigError(f"sink: option {name}={query[name]!r} in {_shown_uri(uri)!r} is not a boolean")
    return value in ("true", "1", "yes")


class _Closing:
    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


# -- null:// ----------------------------------------------------------------
class NullSink(_Closing):
    """Discards batches, counting them: measures everything but the graph."""

    def __init__(self):
        self.statements = 0
        self.batches = 0
        self._offsets: dict[tuple[str, str, int], int] = {}

    def write(self, statements: Sequence[Statement], *, expect=None) -> Written:
        end = offsets_in_statements(statements)
        if end and continuation(self._offsets, end, expect) is Continuation.DONE:
            return Written.ALREADY_APPLIED
        self.statements += len(statements)
        self.batches += 1
        self._offsets.update(end)
        return Written.APPLIED

    def stored_offsets(self, stream, partitions=None):
        """Kept in memory: an exactly-once stream on null:// survives a restart of its stream, not of its process."""
        return {(topic, partition): offset for (name, topic, partition), offset in self._offsets.items()
                if name == stream}

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"NullSink(batches={self.batches}, statements={self.statements})"


def _null_settings(parts, query: dict[str, str], uri: str) -> None:
    _options(query, set(), uri)
    if parts.netloc or parts.path not in ("", "/"):
        raise ConfigError(f"sink: null:// takes no host or path, got {_shown_uri(uri)!r}")


# -- cypherl:// -------------------------------------------------------------
@dataclass(frozen=True)
class CypherlSettings:
    path: str
    fsync: bool = False
    climbs: bool = False                 # the URI's path had a '..' segment (normalised away in `path`)
    admitted_under: str | None = None    # set by an OutputPolicy: the allowed directory the file lies under


class CypherlSink(_Closing):
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
        self._known: dict[str, dict[tuple[str, int], int]] = {}   # per stream: its stored offsets, as in the file
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT   # read too: the sink reads its own tail (cypherl_frames)
        try:
            if beneath is None:
                _make_dirs(os.path.dirname(path))
                self._fd: int | None = os.open(path, flags, FILE_MODE)
            else:   # no symlink at any component below the allowed directory, whatever was swapped since
                _make_dirs(beneath)
                self._fd = open_beneath(beneath, os.path.relpath(path, beneath), flags, FILE_MODE,
                                        dir_mode=DIR_MODE, make_dirs=True)
        except (OSError, ValueError) as exc:
            raise SinkError(f"sink cypherl://{path}: cannot open for appending: {exc}") from None
        try:
            self._recover()
        except OSError as exc:
            self.close()
            raise SinkError(f"sink cypherl://{path}: cannot recover the file's last whole batch: {exc}",
                            transient=True) from None

    def _recover(self) -> None:
        """Cut the file back to its last whole batch; a file without frames (written before them) keeps its
        whole lines and gets an empty frame, so that what follows is framed."""
        with _FileLock(self._fd):
            size = os.fstat(self._fd).st_size
            end = cypherl_frames.verified_end(self._fd, size)
            if end is None:
                end = _after_last_newline(self._fd, size)
                os.ftruncate(self._fd, end)
                _write_all(self._fd, [cypherl_frames.EMPTY_FRAME])
            elif end < size:
                os.ftruncate(self._fd, end)
            self.trimmed = size - end
            if self.fsync and (self.trimmed or end == 0):
                os.fsync(self._fd)

    def write(self, statements: Sequence[Statement], *, expect: Mapping[tuple[str, int], int | None] | None = None
              ) -> Written:
        """Append one batch. An exactly-once batch (ending in offset statements) whose end offsets the file
        already stores is not written again (ALREADY_APPLIED); with `expect`, the offsets it continues from
        are checked first (offset_store.continuation, StoredOffsetsConflict)."""
        if not statements:
            return Written.APPLIED
        end = offsets_in_statements(statements)
        data = self._render(statements)
        with self._lock:
            if self._fd is None:
                raise SinkError(f"sink cypherl://{self.path}: write after close")
            with _FileLock(self._fd):
                known = self._stored_of({stream for stream, _, _ in end})
                if end and continuation(known, end, expect) is Continuation.DONE:
                    return Written.ALREADY_APPLIED
                after = {**known, **end}
                frame = cypherl_frames.frame_line(data, after)
                size = os.fstat(self._fd).st_size
                try:
                    _write_all(self._fd, [data, frame])
                    if self.fsync:
                        os.fsync(self._fd)
                except OSError as exc:
                    self._cut_back(size)
                    raise SinkError(f"sink cypherl://{self.path}: writing a batch of {len(statements)} "
                                    f"statements failed: {exc}", transient=True) from None
            for (stream, topic, partition), offset in end.items():
                self._known[stream][(topic, partition)] = offset
            self.statements += len(statements)
        return Written.APPLIED

    def _stored_of(self, streams: set[str]) -> dict[tuple[str, str, int], int]:
        """The stored offsets of `streams` (read from the file once, then kept as written), by (stream, tp)."""
        out = {}
        for stream in streams:
            if stream not in self._known:
                self._known[stream] = cypherl_frames.stored_offsets(self._fd, os.fstat(self._fd).st_size, stream)
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

    def stored_offsets(self, stream, partitions=None):
        """From memory once read: the file's last frame naming `stream`, then what this sink wrote."""
        with self._lock:
            if self._fd is None:
                raise SinkError(f"sink cypherl://{self.path}: read after close")
            try:
                known = self._stored_of({stream})
            except OSError as exc:
                raise SinkError(f"sink cypherl://{self.path}: reading the stored offsets failed: {exc}",
                                transient=True) from None
        wanted = set(partitions) if partitions is not None else None
        return {(t, p): o for (_, t, p), o in known.items() if wanted is None or (t, p) in wanted}

    def _cut_back(self, size: int) -> None:
        try:
            os.ftruncate(self._fd, size)
        except OSError:
            pass

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __repr__(self) -> str:
        return f"CypherlSink({self.path!r}, fsync={self.fsync})"


class Written(str, Enum):
    """What write() did with an exactly-once batch."""
    APPLIED = "applied"
    ALREADY_APPLIED = "already applied"   # its end offsets were stored already: a lost ack, a retried batch


class _FileLock:
    """An exclusive flock on the file while a batch is written or a torn one cut: another sink on the same file
    (another process) never cuts a batch that is being written."""

    def __init__(self, fd: int):
        self._fd = fd

    def __enter__(self):
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc_info) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)


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


def _cypherl_settings(parts, query: dict[str, str], uri: str) -> CypherlSettings:
    _options(query, {"fsync"}, uri)
    path = unquote(parts.path)
    if parts.netloc or not path.startswith("/"):
        raise ConfigError(f"sink: {_shown_uri(uri)!r} is not an absolute path; relative paths are "
                          f"rejected (write cypherl:///absolute/path/file.cypherl, three slashes)")
    if path.endswith("/") or "\x00" in path:
        raise ConfigError(f"sink: {_shown_uri(uri)!r} does not name a file")
    return CypherlSettings(os.path.normpath(path), _flag(query, "fsync", uri), climbs=".." in path.split("/"))


def _open_cypherl(settings: CypherlSettings, credentials: Mapping[str, str]) -> CypherlSink:
    if settings.admitted_under is None:
        return CypherlSink(settings.path, fsync=settings.fsync)
    # Admitted by an OutputPolicy: opened beneath the allowed directory, following no symlink on the way.
    return CypherlSink(settings.path, fsync=settings.fsync, beneath=settings.admitted_under)


# -- bolt:// ----------------------------------------------------------------
@dataclass(frozen=True)
class BoltSettings:
    scheme: str
    host: str
    port: int
    fingerprint: str | None = None
    retries: int = 5
    unwind: bool = True      # fold runs of one query text into UNWIND statements (unwind.py)


class _Secret:
    """Holds a password so that repr(), vars() and logs show the mask instead."""

    __slots__ = ("_value",)

    def __init__(self, value: str | None):
        self._value = value

    def reveal(self) -> str | None:
        return self._value

    def __repr__(self) -> str:
        return MASK if self._value else "None"


def _conn_status_bad() -> int:
    try:
        import mgclient
    except ImportError:
        return -1
    return getattr(mgclient, "CONN_STATUS_BAD", -1)


def connect_mgclient(**kwargs):
    """The driver boundary: tests replace this to see exactly what the driver receives."""
    try:
        import mgclient
    except ImportError as exc:
        raise SinkError(f"sink: bolt needs pymgclient (`import mgclient` failed: {exc})") from None
    return mgclient.connect(**kwargs)


class BoltSink(_Closing):
    """Writes each batch to Memgraph in one transaction through pymgclient.

    Connects on the first write. A transient failure (sink_faults: by the
    error's type, or a driver error that left the session broken) rolls back,
    drops the connection and retries the whole batch with exponential backoff
    (at most `retries` attempts in all); anything else, or the last failure, is
    a SinkError.

    An exactly-once batch (ending in offset statements) first reads the stored
    offsets in its own transaction: if they already are the batch's end
    offsets it writes nothing. So a commit whose outcome is unknown (the
    connection dropped during commit(): applied or not) is resolved by that
    read on the next attempt, never by writing the batch blindly again. With
    `expect`, the read is a compare-and-set (offset_store.continuation).

    With `unwind` (the default), runs of statements of one query text are sent
    as one UNWIND statement each (unwind.fold): one round trip per run.
    """

    def __init__(self, host: str, port: int = DEFAULT_BOLT_PORT, *, scheme: str = "bolt",
                 username: str | None = None, password: str | None = None, fingerprint: str | None = None,
                 retries: int = 5, backoff_s: float = 0.1, max_backoff_s: float = 2.0,
                 connect: Callable[..., Any] | None = None, sleep: Callable[[float], None] = time.sleep,
                 unwind: bool = True):
        self.scheme, self.host, self.port = scheme, host, port
        self.unwind = unwind
        self.username = username
        self._password = _Secret(password)
        self.fingerprint = _hex(fingerprint) if fingerprint else None
        self.retries, self.backoff_s, self.max_backoff_s = max(1, retries), backoff_s, max_backoff_s
        self._connect_fn, self._sleep = connect, sleep
        self._conn = None
        self._lock = threading.Lock()
        self.batches = 0
        self.attempts = 0
        self.unknown_commits = 0   # commits whose outcome was unknown, resolved by reading the stored offsets

    def write(self, statements: Sequence[Statement], *,
              expect: Mapping[tuple[str, int], int | None] | None = None) -> Written:
        if not statements:
            return Written.APPLIED
        work = [(s.query, _driver_parameters(s.parameters, index)) for index, s in enumerate(statements)]
        end = offsets_in_statements(statements)
        unknown = False   # a commit of this batch failed in flight: it may have been applied
        with self._lock:
            for attempt in range(1, self.retries + 1):
                self.attempts += 1
                committing = False
                try:
                    conn = self._connection()
                    cursor = conn.cursor()
                    if end:
                        stored = self._stored_in_transaction(cursor, {stream for stream, _, _ in end})
                        unknown = False   # resolved by what is stored
                        if continuation(stored, end, expect) is Continuation.DONE:
                            conn.rollback()
                            return Written.ALREADY_APPLIED
                    for query, parameters in fold(work) if self.unwind else work:
                        cursor.execute(query, parameters)
                    committing = True
                    conn.commit()
                    self.batches += 1
                    return Written.APPLIED
                except SinkError:
                    self._abandon()
                    raise
                except Exception as exc:
                    transient = self._lost(exc)
                    self._abandon()
                    if committing and transient:
                        self.unknown_commits += 1   # applied or not: the next attempt reads the offsets first
                        unknown = True
                    if attempt == self.retries or not transient:
                        raise self._failure(len(work), attempt, exc, transient, unknown) from None
                self._sleep(min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s))
        raise AssertionError("unreachable")

    def _stored_in_transaction(self, cursor, streams: set[str]) -> dict[tuple[str, str, int], int]:
        stored: dict[tuple[str, str, int], int] = {}
        for stream in sorted(streams):
            cursor.execute(READ_QUERY, {"stream": stream})
            stored.update(stored_in_rows(stream, cursor.fetchall()))
        return stored

    def stored_offsets(self, stream, partitions=None):
        """The stream's stored offsets, read in a transaction of their own. SinkError on failure, transient when
        the connection or a timeout failed (retry it: see read_stored_offsets_within)."""
        with self._lock:
            try:
                conn = self._connection()
                cursor = conn.cursor()
                cursor.execute(READ_QUERY, {"stream": stream})
                rows = cursor.fetchall()
                conn.commit()
            except SinkError:
                raise
            except Exception as exc:
                transient = self._lost(exc)
                self._abandon()
                raise SinkError(f"sink {self._where()}: reading the stored offsets failed: "
                                f"{redact(f'{type(exc).__name__}: {exc}', self._secrets())}",
                                transient=transient) from None
        wanted = set(partitions) if partitions is not None else None
        return {(topic, partition): offset for topic, partition, offset in rows
                if wanted is None or (topic, partition) in wanted}

    def _lost(self, exc: BaseException) -> bool:
        """Transient by type, or a driver error that left the session broken (pymgclient before 1.6 raised
        DatabaseError for a lost connection and marks the connection CONN_STATUS_BAD)."""
        if is_transient(exc):
            return True
        return self._conn is not None and getattr(self._conn, "status", None) == _conn_status_bad()

    def run_autocommit(self, query: str, parameters: Mapping[str, Any] | None = None) -> None:
        """Run one statement in a transaction of its own (autocommit) on this sink's connection (TLS and
        credentials as for writes): for what Memgraph refuses inside a multi-statement transaction, such
        as CREATE INDEX and CREATE CONSTRAINT. Not retried. SinkError when the connection cannot be made
        (saying so), or naming the statement with the server's message; the next write is one
        transaction per batch again."""
        secrets = self._secrets()
        with self._lock:
            try:
                conn = self._connection()
            except SinkError:
                raise
            except Exception as exc:
                self._abandon()
                raise SinkError(f"sink {self._where()}: cannot connect: "
                                f"{redact(f'{type(exc).__name__}: {exc}', secrets)}") from None
            try:
                conn.autocommit = True
                conn.cursor().execute(query, _driver_parameters(parameters or {}, 0))
            except Exception as exc:
                if self._lost(exc):
                    self._abandon()   # a lost connection: the next call connects afresh
                raise SinkError(f"sink {self._where()}: {query!r} failed: "
                                f"{redact(f'{type(exc).__name__}: {exc}', secrets)}") from None
            finally:
                if self._conn is conn:
                    try:
                        conn.autocommit = False
                    except Exception:
                        self._abandon()

    def _connection(self):
        if self._conn is None:
            kwargs: dict[str, Any] = {"host": self.host, "port": self.port}
            if self.username is not None:
                kwargs["username"] = self.username
                kwargs["password"] = self._password.reveal() or ""
            if self.scheme != "bolt":
                import mgclient
                kwargs["sslmode"] = mgclient.MG_SSLMODE_REQUIRE
                trusted = self._verified_key() if self.scheme == "bolt+s" else self.fingerprint
                if trusted:
                    kwargs["trust_callback"] = _TrustKey(trusted)
            conn = (self._connect_fn or connect_mgclient)(**kwargs)
            conn.autocommit = False
            self._conn = conn
        return self._conn

    def _verified_key(self) -> str:
        """bolt+s: the key of a server whose certificate the system CAs vouch for, for this host name.

        pymgclient accepts any certificate (libmgclient never sets a verify
        mode, see mgtransport.c `mg_secure_transport_init`); it only reports the
        server's key fingerprint to `trust_callback`. So the certificate is
        verified here first, with Python's ssl and the system CAs, and the
        driver's session is then held to that same key.
        """
        key = verified_server_key(self.host, self.port, where=self._where())
        if self.fingerprint and key != self.fingerprint:
            raise SinkError(f"sink {self._where()}: the server's key fingerprint {key[:16]}... is not the pinned "
                            f"fingerprint {self.fingerprint[:16]}...")
        return key

    def _abandon(self) -> None:
        """After a failure: roll back what the server may hold, then start afresh next time."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        for step in (conn.rollback, conn.close):
            try:
                step()
            except Exception:
                pass

    def _failure(self, count: int, attempts: int, exc: Exception, transient: bool, unknown: bool = False
                 ) -> SinkError:
        detail = redact(f"{type(exc).__name__}: {exc}", self._secrets())
        kind = "transient " if transient else ""
        outcome = ("may have been applied (its commit's outcome is unknown; an exactly-once batch's next write "
                   "reads the stored offsets first)" if unknown else "was not applied")
        return SinkError(f"sink {self._where()}: a batch of {count} statements {outcome} after "
                         f"{attempts} attempt(s), {kind}error {detail}", transient=transient,
                         rejected=not transient and is_refusal(exc))

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                try:
                    conn.close()
                except Exception:
                    pass

    def _secrets(self) -> list[str]:
        return [s for s in (self._password.reveal(),) if s]

    def _where(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def __repr__(self) -> str:
        user = f", user={self.username!r}" if self.username is not None else ""
        return f"BoltSink({self._where()!r}{user}, password={self._password!r})"


def _hex(text: str) -> str:
    return re.sub(r"[^0-9a-f]", "", text.lower())


class _TrustKey:
    """pymgclient's trust_callback: accept the TLS session only if the server key is `fingerprint`."""

    __slots__ = ("fingerprint",)

    def __init__(self, fingerprint: str):
        self.fingerprint = _hex(fingerprint)

    def __call__(self, hostname, ip_address, key_type, fingerprint) -> bool:
        return _hex(str(fingerprint)) == self.fingerprint

    def __repr__(self) -> str:
        return f"_TrustKey({self.fingerprint[:16]}...)"


def verified_server_key(host: str, port: int, *, where: str, timeout: float = 10.0) -> str:
    """The TLS boundary of bolt+s: handshake with the system CAs and host name checking (Python's
    `ssl.create_default_context()`); return the server key's fingerprint as pymgclient computes it
    (SHA-512 of the certificate's public key bits, OpenSSL's X509_pubkey_digest), in hex.

    An untrusted certificate is a SinkError (not retried); an unreachable server an OSError (retried).
    """
    context = ssl.create_default_context()
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            with context.wrap_socket(raw, server_hostname=host) as tls:
                der = tls.getpeercert(binary_form=True)
    except ssl.SSLCertVerificationError as exc:
        raise SinkError(f"sink {where}: the server's certificate is not trusted: {exc.verify_message or exc} "
                        f"(bolt+s verifies it against the system CAs and the host name; for a server with a "
                        f"self-signed certificate use bolt+ssc://, with ?fingerprint= to pin its key)") from None
    except ssl.SSLError as exc:
        raise SinkError(f"sink {where}: TLS handshake failed: {exc.reason or exc}") from None
    try:
        return hashlib.sha512(_public_key_bits(der)).hexdigest()
    except (IndexError, ValueError):
        raise SinkError(f"sink {where}: cannot read the server's certificate") from None


def _public_key_bits(certificate_der: bytes) -> bytes:
    """The subjectPublicKey BIT STRING's content of an X.509 certificate (RFC 5280 4.1), unused-bits byte dropped."""
    def element(data: bytes, at: int) -> tuple[int, int, int]:
        tag, length, at = data[at], data[at + 1], at + 2
        if length & 0x80:
            count = length & 0x7F
            length, at = int.from_bytes(data[at:at + count], "big"), at + count
        if at + length > len(data):
            raise ValueError("truncated DER")
        return tag, at, at + length

    _, start, _ = element(certificate_der, 0)                 # Certificate ::= SEQUENCE
    _, at, _ = element(certificate_der, start)                # tbsCertificate ::= SEQUENCE
    tag, _, end = element(certificate_der, at)
    if tag == 0xA0:                                           # [0] EXPLICIT version
        at = end
    for _ in range(5):                                        # serial, signature, issuer, validity, subject
        at = element(certificate_der, at)[2]
    tag, spki, _ = element(certificate_der, at)               # SubjectPublicKeyInfo ::= SEQUENCE
    algorithm_end = element(certificate_der, spki)[2]
    tag, bits, bits_end = element(certificate_der, algorithm_end)
    if tag != 0x03:
        raise ValueError("subjectPublicKey is not a BIT STRING")
    return certificate_der[bits + 1:bits_end]


_PLAIN_TYPES = frozenset({str, int, float, bool, type(None)})


def _driver_parameters(parameters: Mapping[str, Any], index: int) -> dict[str, Any]:
    """Parameters as pymgclient takes them: bytes become UTF-8 text, as in cypherl files."""
    return {name: _driver_value(value, f"${name} (statement {index})") for name, value in parameters.items()}


def _driver_value(value: Any, where: str) -> Any:
    kind = type(value)
    if kind in _PLAIN_TYPES:
        return value
    if kind is list or kind is tuple:
        return [_driver_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        return {k: _driver_value(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return text_of_bytes(value, where)
    return value


def _bolt_settings(parts, query: dict[str, str], uri: str) -> BoltSettings:
    scheme = parts.scheme.lower()
    _options(query, {"retries"} if scheme == "bolt" else {"retries", "fingerprint"}, uri)
    try:
        host, port = parts.hostname, parts.port or DEFAULT_BOLT_PORT
    except ValueError:
        raise ConfigError(f"sink: {_shown_uri(uri)!r} has an invalid port") from None
    if not host or parts.path not in ("", "/"):
        raise ConfigError(f"sink: expected {scheme}://host[:port], got {_shown_uri(uri)!r}")
    retries = query.get("retries", "5")
    if not retries.isdigit() or not 1 <= int(retries) <= 100:
        raise ConfigError(f"sink: option retries={retries!r} in {_shown_uri(uri)!r} is not in 1..100")
    fingerprint = query.get("fingerprint")
    if fingerprint is not None and not re.fullmatch(r"[0-9A-Fa-f:]{16,}", fingerprint):
        raise ConfigError(f"sink: option fingerprint={fingerprint!r} in {_shown_uri(uri)!r} is not hex")
    return BoltSettings(scheme, host, port, fingerprint, int(retries))


def _open_bolt(settings: BoltSettings, credentials: Mapping[str, str]) -> BoltSink:
    username = credentials.get(USERNAME_KEY)
    password = credentials.get(PASSWORD_KEY)
    if password is not None and username is None:
        raise ConfigError(f"credentials: {PASSWORD_KEY!r} is set but {USERNAME_KEY!r} is not "
                          f"(sink {settings.scheme}://{settings.host}:{settings.port})")
    return BoltSink(settings.host, settings.port, scheme=settings.scheme, username=username,
                    password=password, fingerprint=settings.fingerprint, retries=settings.retries,
                    unwind=settings.unwind)


SCHEMES: dict[str, Scheme] = {
    "null": Scheme(_null_settings, lambda settings, credentials: NullSink()),
    "cypherl": Scheme(_cypherl_settings, _open_cypherl),
    "bolt": Scheme(_bolt_settings, _open_bolt),
    "bolt+s": Scheme(_bolt_settings, _open_bolt),
    "bolt+ssc": Scheme(_bolt_settings, _open_bolt),
}
