"""`mgstreams serve`: run a registry and its streams, and serve the control API.

Order matters: the state directory's lock first (a second host exits at once,
naming the holder), then the listening socket (a bad address fails before any
stream starts consuming), then the streams that were running resume. SIGTERM
and SIGINT stop serving, then close the registry: each stream finishes its
batch, commits and leaves its group, and the process exits 0. From the signal
on, no stream is restarted (stream processes in the host's process group got
the signal too) and calls waiting for an offset change answer at once.
"""
from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from stream_registry import StreamRegistry, sandbox
from stream_registry.allowlists import allowed_configs, allowed_file_dirs
from stream_registry.errors import ConfigError
from stream_registry.graph.sinks.policy import OutputPolicy
from stream_registry.group_policy import GroupPolicy
from stream_registry.lag.collector import DEFAULT_INTERVAL_S as DEFAULT_LAG_SAMPLE_INTERVAL_S
from stream_registry.lag.collector import LagCollector
from stream_registry.lag.history import LagHistory
from stream_registry.model import STOP_TIMEOUT_S
from stream_registry.registry import Isolation
from stream_registry.safe_paths import check_private_dir

from .. import transform_dirs
from ..secret_env import secret_variables
from ..settings import DEFAULT_LISTEN, DEFAULT_SINK, DEFAULT_SINK_ENV, TOKEN_ENV
from ..tokens import generated_token
from .api import Limits, create_app
from .boundary import SERVER_NAMES_ENV
from .connections import MAX_CONNECTIONS_ENV, guarded_protocol
from .entry import PAGE

log = logging.getLogger("mgstreams.host")

MIN_REMOTE_TOKEN_LENGTH = 32     # a token guarding a non-loopback listen
HEADER_TIMEOUT_S = 10.0          # a connection sends a request's headers within this, or is closed
KEEP_ALIVE_S = 5                 # an idle connection after a response is closed after this
GRACEFUL_SHUTDOWN_S = 5          # requests in progress at a stop get this long to answer (waiting calls answer at once)
DEFAULT_MAX_CONNECTIONS = 64
LIMIT_ENVS = {"creates": "MGSTREAMS_MAX_CREATES", "previews": "MGSTREAMS_MAX_PREVIEWS",
              "preview_bytes": "MGSTREAMS_MAX_PREVIEW_BYTES"}


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Listen:
        host, sep, port = text.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise ConfigError(f"listen: expected HOST:PORT (e.g. {DEFAULT_LISTEN}), got {text!r}")
        return cls(host, int(port))

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def scrub_environment(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Remove the host's own secrets ($MGSTREAMS_* variables that look secret) from the environment its
    children inherit; the names removed."""
    if environ is None:
        environ = os.environ
    removed = secret_variables(environ)
    for key in removed:
        del environ[key]
    return removed


def bind(listen: Listen) -> socket.socket:
    family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY only on connections of a socket whose proto says TCP.
    # Without it, each answer on a kept-alive connection (httpx, a browser) waited out the client's delayed
    # ACK behind Nagle's algorithm: 44 ms per request instead of about one.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((listen.host, listen.port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"listen: cannot bind {listen.host}:{listen.port}: {exc.strerror}") from None
    sock.listen(128)
    sock.set_inheritable(False)
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server with the signals left to `Shutdown`.

    uvicorn's own handling re-raises SIGTERM once it stops serving: the process
    would die by the signal (exit -15) before the registry commits and closes.
    """

    def capture_signals(self):
        return contextlib.nullcontext()


class Shutdown:
    """SIGTERM/SIGINT over the host's whole life: stop serving; the registry closes; exit 0.

    A signal that arrives before the server runs (while streams resume) makes it
    stop as soon as it starts; a second SIGINT forces uvicorn to drop open
    connections.
    """

    def __init__(self) -> None:
        self.requested = False
        self._server: uvicorn.Server | None = None
        self._on_stop: Callable[[], None] | None = None
        self._previous: dict = {}

    def __enter__(self) -> Shutdown:
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def attach(self, server: uvicorn.Server, on_stop: Callable[[], None] | None = None) -> None:
        """Stop `server` at the signal, and call `on_stop` (on a thread of its own: not in a signal handler)."""
        self._server, self._on_stop = server, on_stop
        server.should_exit = server.should_exit or self.requested
        if self.requested:
            self._stopping()

    def _handle(self, sig: int, frame) -> None:
        self.requested = True
        self._stopping()
        if self._server is not None:
            self._server.handle_exit(sig, frame)

    def _stopping(self) -> None:
        if self._on_stop is not None:
            threading.Thread(target=self._on_stop, name="mgstreams-stopping", daemon=True).start()


def start_sandbox(state_dir: str | os.PathLike) -> str | None:
    """The host not dumpable, and the state directory named to the sandbox of every child it spawns
    (stream_registry.sandbox); a warning, logged and shown in /health, where the kernel has no Landlock."""
    if not sandbox.harden_host():
        log.warning("could not make the host not dumpable (prctl PR_SET_DUMPABLE)")
    os.environ[sandbox.STATE_DIR_ENV] = str(Path(state_dir).resolve())
    warning = sandbox.status().get("warning")
    if warning:
        log.warning("sandbox: %s", warning)
    return str(warning) if warning else None


def limits_from_env(environ=None) -> Limits:
    """The caps on concurrent work, from $MGSTREAMS_MAX_CREATES, _PREVIEWS, _PREVIEW_BYTES."""
    environ = os.environ if environ is None else environ
    values = {}
    for field, name in LIMIT_ENVS.items():
        text = environ.get(name, "").strip()
        if text:
            if not text.isdigit() or int(text) < 1:
                raise ConfigError(f"{name}: expected a positive integer, got {text!r}")
            values[field] = int(text)
    return Limits(**values)


def check_state_dir(state_dir: str | os.PathLike) -> None:
    """The state directory holds the streams' secrets and configs: private, however it was named
    (the default, $MGSTREAMS_STATE_DIR or --state-dir), or a planted state file plants configs."""
    path = Path(state_dir)
    if not path.exists() and not path.is_symlink():
        path.mkdir(parents=True, mode=0o700)
    check_private_dir(path, "state_dir")


def serve(state_dir: str | os.PathLike, listen_text: str = DEFAULT_LISTEN, token: str | None = None,
          default_sink: str | None = None, ready=print, stop_timeout: float = STOP_TIMEOUT_S,
          lag_sample_interval: float = DEFAULT_LAG_SAMPLE_INTERVAL_S, no_token: bool = False) -> None:
    """Run the host until SIGTERM/SIGINT. `ready(line)` is told the URL once it serves.

    Without a token (and without `no_token`, allowed on loopback only) the host
    makes one in its state directory and says where. Every `lag_sample_interval`
    seconds a background thread samples every stream's partitions (committed
    offset, log end) for lag verdicts and lag in seconds.
    """
    listen = Listen.parse(listen_text)
    if not listen.loopback and not token:
        raise ConfigError(f"listen: {listen_text!r} is not a loopback address; a token is required "
                          f"(--token-file FILE or ${TOKEN_ENV})")
    if no_token and token:
        raise ConfigError("no_token: --no-token and a token (--token-file, $MGSTREAMS_TOKEN) exclude each other")
    if not listen.loopback and token and len(token) < MIN_REMOTE_TOKEN_LENGTH:
        raise ConfigError(f"token: {len(token)} characters; a host listening beyond loopback needs at least "
                          f"{MIN_REMOTE_TOKEN_LENGTH} (e.g. python -c 'import secrets; "
                          f"print(secrets.token_urlsafe(32))')")
    scrub_environment()            # before any child is spawned: children inherit os.environ
    allowed_configs()              # an operator's list naming a code-loading property stops the host here
    allowed_file_dirs()
    limits = limits_from_env()
    group_policy = GroupPolicy.from_env(loopback=listen.loopback)
    max_connections = int(os.environ.get(MAX_CONNECTIONS_ENV, "") or DEFAULT_MAX_CONNECTIONS)
    server_names = tuple(n.strip() for n in os.environ.get(SERVER_NAMES_ENV, "").split(",") if n.strip())
    check_state_dir(state_dir)
    OutputPolicy.for_state_dir(state_dir)   # output directories someone else can write stop the host here
    own_transformations = transform_dirs.allow_own_dir(state_dir)   # before a stream process is spawned
    sandbox_warning = start_sandbox(state_dir)   # after: the children read the own directory
    with Shutdown() as shutdown:
        registry = StreamRegistry(state_dir, isolation=Isolation.PROCESS, stop_timeout=stop_timeout,
                                  group_policy=group_policy,
                                  holder=f"`mgstreams serve` (pid {os.getpid()} on {socket.gethostname()})")
        lag = None
        try:
            transform_dirs.record(state_dir)   # so `mgstreams backfill --stream` finds what this host finds
            where = ""
            if token is None and not no_token:   # once the state directory is ours
                token, token_path = generated_token(state_dir)
                where = f"; token in {token_path}"
            elif no_token:
                log.warning("serving without a token (--no-token): every local user and process can drive it")
            sock = bind(listen)
            host, port = sock.getsockname()[:2]
            url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
            lag = LagCollector(registry, lag_sample_interval, history=LagHistory(state_dir)).start()
            app = create_app(registry, token=token,
                             default_sink=default_sink or os.environ.get(DEFAULT_SINK_ENV) or DEFAULT_SINK, lag=lag,
                             limits=limits, server_names=server_names, loopback=listen.loopback,
                             sandbox_warning=sandbox_warning)
            server = _Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
                                            timeout_keep_alive=KEEP_ALIVE_S,
                                            http=guarded_protocol(HEADER_TIMEOUT_S, max_connections, token)))
            shutdown.attach(server, registry.begin_close)
            ready(f"mgstreams host serving at {url} (state: {Path(state_dir).resolve()}, "
                  f"{len(registry.list())} stream(s){where}; your transformations: {own_transformations}); "
                  f"its page: {url}{PAGE}")
            server.run(sockets=[sock])
        finally:
            if lag is not None:
                lag.close()
            registry.close()
    log.info("host stopped: every stream closed")
