"""Graph sinks: one interface for every place a batch of statements can go.

A sink is named by a URI, validated when a stream is created (no I/O) and
opened when it starts:

- `cypherl:///abs/path/file.cypherl[?fsync=true]` appends one rendered
  statement per line (`mgconsole < file` imports it); missing directories are
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

`write(statements)` is all or nothing from the caller's view and raises
SinkError on failure. Add a scheme by adding an entry to `SCHEMES`.
"""
from __future__ import annotations

import hashlib
import os
import re
import socket
import ssl
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence
from urllib.parse import parse_qsl, unquote, urlsplit

from .cypher_literals import render_statement, text_of_bytes
from .offset_store import READ_QUERY, offsets_in_cypherl, offsets_in_statements
from ..errors import ConfigError, SinkError
from ..redaction import MASK, redact
from ..safe_paths import check_private_dir, open_beneath
from .transform import Statement

USERNAME_KEY = "bolt.username"
PASSWORD_KEY = "bolt.password"
DEFAULT_BOLT_PORT = 7687
OUTPUT_DIRS_ENV = "MGSTREAMS_OUTPUT_DIRS"
OUTPUT_SUBDIR = "output"
FILE_MODE = 0o640
DIR_MODE = 0o750
_NO_CREDENTIALS: Mapping[str, str] = MappingProxyType({})


class Sink(Protocol):
    def write(self, statements: Sequence[Statement]) -> None:
        """Apply one batch in one transaction; raise SinkError if it was not applied."""

    def stored_offsets(self, stream: str, partitions: Iterable[tuple[str, int]] | None = None
                       ) -> dict[tuple[str, int], int]:
        """The offsets an exactly-once stream stored with its batches (offset_store); SinkError if unreadable."""

    def close(self) -> None:
        """Release files and connections; idempotent."""


def validate_sink_uri(uri: str, output: "OutputPolicy | None" = None) -> None:
    """Raise ConfigError naming field `sink` if `uri` cannot be opened; never connects, never creates.

    With `output`, a file sink must also lie under one of its directories.
    """
    scheme, settings = _parse(uri)
    if output is not None:
        output.admit(settings, uri)


def open_sink(uri: str, credentials: Mapping[str, str] = _NO_CREDENTIALS,
              output: "OutputPolicy | None" = None) -> Sink:
    """Open the sink `uri` names; with `output`, the checks of validate_sink_uri are made again first
    (the file system may have changed since the stream was created)."""
    scheme, settings = _parse(uri)
    if output is not None:
        settings = output.admit(settings, uri)
    return SCHEMES[scheme].open(settings, credentials or _NO_CREDENTIALS)


def read_stored_offsets(uri: str, stream: str, credentials: Mapping[str, str] = _NO_CREDENTIALS,
                        output: "OutputPolicy | None" = None, partitions: Iterable[tuple[str, int]] | None = None
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
                      environ: Mapping[str, str] | None = None) -> "OutputPolicy":
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

    def write(self, statements: Sequence[Statement]) -> None:
        self.statements += len(statements)
        self.batches += 1
        self._offsets.update(offsets_in_statements(statements))

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
    """Appends rendered statements to a .cypherl file, one per line, one write per batch.

    A batch is rendered completely before anything is written, then written
    with a single append; if that write fails part-way the file is cut back to
    its previous size, so a reader never sees half a batch from a failed write.
    """

    def __init__(self, path: str, *, fsync: bool = False, beneath: str | None = None):
        self.path = path
        self.fsync = fsync
        self.statements = 0
        self._lock = threading.Lock()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
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

    def write(self, statements: Sequence[Statement]) -> None:
        if not statements:
            return
        data = self._render(statements)
        with self._lock:
            if self._fd is None:
                raise SinkError(f"sink cypherl://{self.path}: write after close")
            size = os.fstat(self._fd).st_size
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._fd, view):]
                if self.fsync:
                    os.fsync(self._fd)
            except OSError as exc:
                self._cut_back(size)
                raise SinkError(f"sink cypherl://{self.path}: writing a batch of {len(statements)} "
                                f"statements failed: {exc}") from None
            self.statements += len(statements)

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
        with self._lock:
            try:
                return offsets_in_cypherl(self.path, stream, partitions)
            except OSError as exc:
                raise SinkError(f"sink cypherl://{self.path}: reading the stored offsets failed: {exc}") from None

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


class _Secret:
    """Holds a password so that repr(), vars() and logs show the mask instead."""

    __slots__ = ("_value",)

    def __init__(self, value: str | None):
        self._value = value

    def reveal(self) -> str | None:
        return self._value

    def __repr__(self) -> str:
        return MASK if self._value else "None"


def connect_mgclient(**kwargs):
    """The driver boundary: tests replace this to see exactly what the driver receives."""
    try:
        import mgclient
    except ImportError as exc:
        raise SinkError(f"sink: bolt needs pymgclient (`import mgclient` failed: {exc})") from None
    return mgclient.connect(**kwargs)


_TRANSIENT_TEXT = re.compile(
    r"conflicting transaction|serializ|retry this transaction|connection (?:is )?(?:closed|lost|reset|refused)"
    r"|broken pipe|failed to (?:send|receive|read|write|connect)|bad (?:session|connection)|timed out"
    r"|not connected|server (?:closed|unavailable)|socket", re.I)


def is_rejected_data(exc: BaseException) -> bool:
    """The server refused the statements themselves (a type error, a constraint violation): the DB-API
    DatabaseError family pymgclient raises for query errors, without its operational and interface errors."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    return "DatabaseError" in names and not names & {"OperationalError", "InterfaceError"} and not is_transient(exc)


def is_transient(exc: BaseException) -> bool:
    """Worth retrying the whole batch: lost connections, conflicts, serialization errors."""
    if isinstance(exc, (ConnectionError, TimeoutError)) or getattr(exc, "transient", False) is True:
        return True
    if any(cls.__name__ == "TransientError" for cls in type(exc).__mro__):
        return True
    return bool(_TRANSIENT_TEXT.search(str(exc)))


class BoltSink(_Closing):
    """Writes each batch to Memgraph in one transaction through pymgclient.

    Connects on the first write. A transient failure rolls back, drops the
    connection and retries the whole batch with exponential backoff (at most
    `retries` attempts in all); anything else, or the last failure, is a SinkError.
    """

    def __init__(self, host: str, port: int = DEFAULT_BOLT_PORT, *, scheme: str = "bolt",
                 username: str | None = None, password: str | None = None, fingerprint: str | None = None,
                 retries: int = 5, backoff_s: float = 0.1, max_backoff_s: float = 2.0,
                 connect: Callable[..., Any] | None = None, sleep: Callable[[float], None] = time.sleep):
        self.scheme, self.host, self.port = scheme, host, port
        self.username = username
        self._password = _Secret(password)
        self.fingerprint = _hex(fingerprint) if fingerprint else None
        self.retries, self.backoff_s, self.max_backoff_s = max(1, retries), backoff_s, max_backoff_s
        self._connect_fn, self._sleep = connect, sleep
        self._conn = None
        self._lock = threading.Lock()
        self.batches = 0
        self.attempts = 0

    def write(self, statements: Sequence[Statement]) -> None:
        if not statements:
            return
        work = [(s.query, _driver_parameters(s.parameters, index)) for index, s in enumerate(statements)]
        with self._lock:
            for attempt in range(1, self.retries + 1):
                self.attempts += 1
                try:
                    self._apply(work)
                    self.batches += 1
                    return
                except SinkError:
                    raise
                except Exception as exc:
                    self._abandon()
                    if attempt == self.retries or not is_transient(exc):
                        raise self._failure(len(work), attempt, exc) from None
                self._sleep(min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s))

    def stored_offsets(self, stream, partitions=None):
        with self._lock:
            try:
                cursor = self._connection().cursor()
                cursor.execute(READ_QUERY, {"stream": stream})
                rows = cursor.fetchall()
                self._connection().commit()
            except SinkError:
                raise
            except Exception as exc:
                self._abandon()
                raise SinkError(f"sink {self._where()}: reading the stored offsets failed: "
                                f"{redact(f'{type(exc).__name__}: {exc}', self._secrets())}") from None
        return {(topic, partition): offset for topic, partition, offset in rows}

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
                if is_transient(exc):
                    self._abandon()   # a lost connection: the next call connects afresh
                raise SinkError(f"sink {self._where()}: {query!r} failed: "
                                f"{redact(f'{type(exc).__name__}: {exc}', secrets)}") from None
            finally:
                if self._conn is conn:
                    try:
                        conn.autocommit = False
                    except Exception:
                        self._abandon()

    def _apply(self, work: list[tuple[str, dict]]) -> None:
        conn = self._connection()
        cursor = conn.cursor()
        for query, parameters in work:
            cursor.execute(query, parameters)
        conn.commit()

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

    def _failure(self, count: int, attempts: int, exc: Exception) -> SinkError:
        detail = redact(f"{type(exc).__name__}: {exc}", self._secrets())
        kind = "transient " if is_transient(exc) else ""
        return SinkError(f"sink {self._where()}: a batch of {count} statements was not applied after "
                         f"{attempts} attempt(s), {kind}error {detail}", transient=bool(kind),
                         rejected=is_rejected_data(exc))

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
                    password=password, fingerprint=settings.fingerprint, retries=settings.retries)


SCHEMES: dict[str, Scheme] = {
    "null": Scheme(_null_settings, lambda settings, credentials: NullSink()),
    "cypherl": Scheme(_cypherl_settings, _open_cypherl),
    "bolt": Scheme(_bolt_settings, _open_bolt),
    "bolt+s": Scheme(_bolt_settings, _open_bolt),
    "bolt+ssc": Scheme(_bolt_settings, _open_bolt),
}
