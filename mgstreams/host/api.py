"""The host's control API: HTTP + JSON in the shape of Kafka Connect's REST API.

Handlers are thin: read the request, call the registry in a worker thread, encode
the result. An offset change is handed off in a worker thread and then awaited on
the event loop holding no thread (waits.py): its deadline counts from the
request's arrival. An alter's restart holds no lock of its stream: other calls
answer meanwhile (the stream says it is restarting). The dashboards (/lag, /ui, /metrics) answer from the lag
sampler's last round, saying how old it is: no request waits on the sampler.
`GET /health` needs no token (a liveness probe's; Kafka Connect's KIP-1017 shape, `{"status": "healthy" | "degraded",
"message": ...}`, naming no stream: see health.py).
`PATCH /streams/{name}` alters a stream (ALTERABLE_FIELDS); a running one restarts to apply it.
Errors are `{"error": "<field>: <reason>"}`: 400 bad input, 401 no token, 403 /
415 / 421 a request a web page made (boundary.py), 404 unknown stream, 409 state
conflict, 413 a body over 1 MiB or a preview over its byte cap, 503 Kafka did not
answer or a cap on concurrent creates or previews is reached; 500 only for a bug,
and even then no traceback and no secret reaches the client.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import hmac
import json
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from stream_registry import StreamConfig, StreamRegistry
from stream_registry.config import ALTER_OPTIONS, ALTERABLE_FIELDS, OPTION_FIELDS
from stream_registry.errors import BodyTooLarge, Busy, StreamError, StreamExists, StreamNotFound
from stream_registry.lag.collector import LagCollector
from stream_registry.lag.outage import last_known_offsets
from stream_registry.model import CHECK_TIMEOUT_MS

from ..settings import DEFAULT_SINK
from ..wire import to_json
from . import entry, ui, ui_script
from . import request_parts as parts
from .boundary import BrowserBoundary
from .health import health_of
from .metrics import registry_metrics
from .waits import Waits

log = logging.getLogger("mgstreams.host")

DEFAULT_TRANSFORM = "stream_registry.builtin_transformations.merge_messages"
CREATE_FIELDS = ("name", "topics", "bootstrap_servers", "transform", "sink", "consumer_group", "batch_size",
                 "batch_interval_ms", "configs", "credentials", *OPTION_FIELDS)
OFFSET_FIELDS = ("offset", "timeout_ms", "dry_run")
REVERT_FIELDS = ("timeout_ms", "dry_run", "partitions")
CHECK_FIELDS = ("offset", "limit", "timeout_ms")


@dataclass(frozen=True)
class Limits:
    """How much one host does at once for its callers: beyond it, a 503 naming the cap."""
    creates: int = 4                      # creates in progress (each may wait on an unreachable cluster)
    previews: int = 2                     # previews (`check`) in progress, each a child process
    preview_bytes: int = 16 << 20         # the most a preview's answer may hold


class _Cap:
    """A count of work in progress that refuses, never queues: a queue would hold connections open."""

    def __init__(self, what: str, most: int, flag: str):
        self._what, self._most, self._flag = what, most, flag
        self._lock = threading.Lock()
        self._running = 0

    def __enter__(self) -> _Cap:
        with self._lock:
            if self._running >= self._most:
                raise Busy(f"{self._what}: {self._running} already in progress, the most this host runs at once "
                           f"({self._flag} {self._most}); try again shortly")
            self._running += 1
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._running -= 1


def create_app(registry: StreamRegistry, *, token: str | None = None,
               default_sink: str = DEFAULT_SINK, lag: LagCollector | None = None,
               limits: Limits = Limits(), server_names: tuple[str, ...] = (), loopback: bool = True,
               sandbox_warning: str | None = None):
    """The ASGI app serving `registry`; with `token`, every request needs `Authorization: Bearer <token>`.

    `lag` is the host's lag sampler; without one, a sampler that samples only when asked is made.
    The browser boundary (Host, Origin, Content-Type) wraps everything: `server_names` are the names
    besides IP literals (and `localhost` when `loopback`) the host answers to.
    """
    if lag is None:
        lag = LagCollector(registry)
    creating = _Cap("creates", limits.creates, "$MGSTREAMS_MAX_CREATES")
    previewing = _Cap("previews", limits.previews, "$MGSTREAMS_MAX_PREVIEWS")
    waits = Waits(registry)

    async def settled(hand_off: Callable[[], Any]) -> Response:
        """An offset call: handed off in a worker thread, then awaited here, then its answer read."""
        call = await run_in_threadpool(hand_off)
        return JSONResponse(to_json(await waits.answer(call)))

    async def health(request: Request) -> Response:
        # where the kernel has no Landlock, a probe sees it (stream_registry.sandbox)
        return JSONResponse({**health_of(registry, lag), **({"sandbox": sandbox_warning} if sandbox_warning else {})})

    async def list_streams(request: Request) -> Response:
        return await _call(registry.list)

    async def create(request: Request) -> Response:
        body = await parts.body(request, CREATE_FIELDS, required=("name", "topics", "bootstrap_servers"))
        body.setdefault("sink", default_sink)
        body["transform"] = body.get("transform") or DEFAULT_TRANSFORM
        body["consumer_group"] = body.get("consumer_group") or None
        fields = {OPTION_FIELDS.get(key, key): value for key, value in body.items()}

        def capped_create():
            config = StreamConfig(**fields)   # the allowlists, before the cap is taken and any client is built
            with creating:
                return create_stream(registry, config)
        return await _call(capped_create, status=201)

    async def get(request: Request) -> Response:
        return await _call(lambda: registry.get(parts.name(request)))

    async def alter(request: Request) -> Response:
        # Every create field is known here, so a field that cannot be altered is named as such (400).
        body = await parts.body(request, tuple(dict.fromkeys((*ALTERABLE_FIELDS, *ALTER_OPTIONS, *CREATE_FIELDS))),
                                required=())
        name = parts.name(request)
        return await _call(lambda: registry.alter(name, body))

    async def drop(request: Request) -> Response:
        return await _call(lambda: registry.drop(parts.name(request)))

    async def start(request: Request) -> Response:
        return await _call(lambda: registry.start(parts.name(request)))

    async def stop(request: Request) -> Response:
        return await _call(lambda: registry.stop(parts.name(request)))

    async def acknowledge_loss(request: Request) -> Response:
        return await _call(lambda: registry.acknowledge_loss(parts.name(request)))

    async def offsets(request: Request) -> Response:
        name = parts.name(request)

        def describe():   # during an outage the last round's rows at once, each saying of when it is
            registry.get(name)   # an unknown name is a 404 either way
            return last_known_offsets(next((s for s in lag.latest() if s.name == name), None), time.time()) \
                or registry.describe(name)
        return await _call(describe)

    async def set_offset(request: Request) -> Response:
        arrived = time.monotonic()
        body = await parts.body(request, OFFSET_FIELDS, required=("offset",))
        timeout, dry_run = parts.timeout(body), parts.dry_run(body)
        name = parts.name(request)
        return await settled(lambda: registry.request_offset(name, body["offset"], timeout=timeout, dry_run=dry_run,
                                                             arrived=arrived))

    async def history(request: Request) -> Response:
        limit = parts.limit(request.query_params.get("limit"))
        return await _call(lambda: registry.history(parts.name(request), limit))

    async def stream_lag(request: Request) -> Response:
        return await _call(lambda: lag.lag(parts.name(request)))

    async def all_lag(request: Request) -> Response:
        return await _call(lag.streams)

    async def ui_page(request: Request) -> Response:
        def series(name: str):
            try:
                return lag.series(name)
            except StreamNotFound:   # dropped while the page is drawn
                return [], []

        def render() -> str:
            spark = {i.name: i.spark for i in registry.list() if i.spark}   # a Spark stream's query (ui.spark_line)
            return ui.page(lag.streams(), series, time.time(), refresh_s=max(lag.interval, 2.0), spark=spark)
        return HTMLResponse(await run_in_threadpool(render), headers=ui_script.HEADERS)

    async def revert(request: Request) -> Response:
        arrived = time.monotonic()
        body = await parts.body(request, REVERT_FIELDS, required=(), empty_ok=True)
        timeout, dry_run = parts.timeout(body), parts.dry_run(body)
        name, change_id = parts.name(request), parts.change_id(request.path_params["change_id"])
        partitions = body.get("partitions")
        return await settled(lambda: registry.request_revert(name, change_id, timeout=timeout, dry_run=dry_run,
                                                             partitions=partitions, arrived=arrived))

    async def pending(request: Request) -> Response:
        return await _call(lambda: registry.pending(parts.name(request)))

    async def cancel_pending(request: Request) -> Response:
        return await _call(lambda: registry.cancel_pending(parts.name(request)))

    async def check(request: Request) -> Response:
        body = await parts.body(request, CHECK_FIELDS, required=(), empty_ok=True)
        timeout = parts.timeout(body, CHECK_TIMEOUT_MS)
        name = parts.name(request)

        def capped_check():
            with previewing:
                try:
                    answer = to_json(registry.check(name, body.get("offset", "committed"),
                                                    limit=body.get("limit", 10), timeout=timeout))
                    encoded = json.dumps(answer).encode()
                    if len(encoded) > limits.preview_bytes:
                        raise PreviewTooLarge(f"check: the preview holds {len(encoded)} bytes, more than the "
                                              f"{limits.preview_bytes} the host returns ($MGSTREAMS_MAX_PREVIEW_BYTES); "
                                              f"ask for fewer records (limit)")
                    return encoded
                finally:
                    answer = encoded = None
                    _return_memory()
        return Response(await run_in_threadpool(capped_check), media_type="application/json")

    metrics_registry = registry_metrics(registry, lag)

    async def metrics(request: Request) -> Response:
        text = await run_in_threadpool(generate_latest, metrics_registry)
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/streams", list_streams, methods=["GET"]),
        Route("/streams", create, methods=["POST"]),
        Route("/streams/{name}", get, methods=["GET"]),
        Route("/streams/{name}", drop, methods=["DELETE"]),
        Route("/streams/{name}", alter, methods=["PATCH"]),
        Route("/streams/{name}/start", start, methods=["PUT"]),
        Route("/streams/{name}/stop", stop, methods=["PUT"]),
        Route("/streams/{name}/acknowledge-loss", acknowledge_loss, methods=["PUT"]),
        Route("/streams/{name}/offsets", offsets, methods=["GET"]),
        Route("/streams/{name}/offsets", set_offset, methods=["PATCH"]),
        Route("/streams/{name}/history", history, methods=["GET"]),
        Route("/streams/{name}/lag", stream_lag, methods=["GET"]),
        Route("/lag", all_lag, methods=["GET"]),
        Route("/ui", ui_page, methods=["GET"]),
        Route("/", entry.home, methods=["GET"]),
        Route("/streams/{name}/history/{change_id}/revert", revert, methods=["POST"]),
        Route("/streams/{name}/pending", pending, methods=["GET"]),
        Route("/streams/{name}/pending", cancel_pending, methods=["DELETE"]),
        Route("/streams/{name}/check", check, methods=["POST"]),
    ]
    middleware = [Middleware(_TokenRequired, token=token)] if token else []
    app = Starlette(routes=routes, middleware=middleware, exception_handlers={
        StreamError: _stream_error, 404: _not_found, 405: _not_allowed, Exception: _internal_error})
    # No 307 to the path without its trailing slash: a client that does not follow it (DELETE /streams/)
    # got an empty body; every unknown path gets a JSON 404 instead.
    app.router.redirect_slashes = False
    return BrowserBoundary(app, names=server_names, loopback=loopback)


class PreviewTooLarge(BodyTooLarge):
    """A preview's answer is over the byte cap (413)."""


def _return_memory() -> None:
    """Give the allocator's free pages back to the system after a preview's answer (glibc keeps them)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        return libc
    except (OSError, AttributeError):   # not glibc: nothing to trim
        return None


_LIBC = _libc()


def create_stream(registry: StreamRegistry, config: StreamConfig):
    """Create, with a name already taken being a conflict (409, as in Kafka Connect), not bad input."""
    config.validate()
    try:
        registry.get(config.name)
    except StreamNotFound:
        return registry.create(config)
    raise StreamExists(f"name: a stream named {config.name!r} already exists")


async def _call(action: Callable[[], Any], status: int = 200) -> Response:
    return JSONResponse(to_json(await run_in_threadpool(action)), status_code=status)


# -- errors and auth ----------------------------------------------------------------------
def _error(message: str, status: int, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse({"error": " ".join(str(message).split())}, status_code=status, headers=headers)


async def _stream_error(request: Request, exc: StreamError) -> Response:
    return _error(str(exc), exc.http_status)   # each error class owns its status (stream_registry.errors)


# A stream's paths as sent (percent-encoded): a name holding "/" (%2F) or an empty one matches no route
# once decoded, yet it is a stream name that is wrong, not the path.
_STREAM_PATH = re.compile(r"/streams/(?P<name>[^/]*)(?P<rest>/(?:start|stop|offsets|history|lag|pending|check|"
                          r"history/[^/]*/revert))?")


async def _not_found(request: Request, exc: Exception) -> Response:
    raw = request.scope.get("raw_path")
    match = _STREAM_PATH.fullmatch(raw.decode("latin-1")) if raw else None
    if match and (match["name"] or match["rest"] or request.method == "DELETE"):
        name = unquote(match["name"], errors="replace")
        if not name:
            return _error(f"name: a stream name is required in {request.url.path}", 404)
        return _error(f"name: no stream named {name!r}", 404)
    return _error(f"path: no resource at {request.url.path}", 404)


async def _not_allowed(request: Request, exc: Exception) -> Response:
    allow = ", ".join(sorted({method for route in request.app.router.routes
                              if isinstance(route, Route) and route.path_regex.match(request.scope["path"])
                              for method in route.methods or ()}))
    return _error(f"method: {request.method} is not allowed on {request.url.path} (allowed: {allow})", 405,
                  {"Allow": allow})


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.error("internal error on %s %s: %s", request.method, request.url.path, type(exc).__name__)
    return _error(f"internal error: {type(exc).__name__}", 500)


class _TokenRequired:
    """Every request but /health carries the host's bearer token. Plain ASGI: starlette's BaseHTTPMiddleware
    runs each request in a task of its own behind memory streams, about a millisecond on every call."""

    def __init__(self, app: ASGIApp, token: str):
        self.app = app
        self._expected = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self._refusal(Request(scope)) if scope["type"] == "http" else None
        if refusal is None:
            await self.app(scope, receive, send)
        else:
            await refusal(scope, receive, send)

    def _refusal(self, request: Request) -> Response | None:
        if request.method == "GET" and request.url.path == "/health":
            return None   # liveness probes carry no token; it answers a status and a count only
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if not scheme and request.method == "GET" and request.url.path in entry.PAGE_PATHS:
            # a browser cannot send a bearer header when it opens a page: /ui?token=... (as Jupyter's URLs)
            scheme, given = "bearer", request.query_params.get("token", "")
        # compare_digest runs in constant time for any input; the scheme is case-insensitive (RFC 9110)
        if hmac.compare_digest(given.strip().encode(), self._expected) and scheme.lower() == "bearer":
            return None
        if request.method == "GET" and request.url.path in entry.PAGE_PATHS:
            return entry.sign_in(request)   # a browser: an HTML page saying how to get in
        return _error("authorization: a valid bearer token is required (Authorization: Bearer ...)", 401,
                      {"WWW-Authenticate": 'Bearer realm="mgstreams"'})
