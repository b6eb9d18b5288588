"""A total deadline for the HTTP calls of a client library (the Schema Registry's), not a per-read timeout.

httpx's timeouts are per operation: a server that drips its answer a byte every
few seconds holds a call for as long as it likes. Here every socket operation
of the client's connection pool (connect, TLS, each read and write) gets at
most the time left before the deadline of the call in progress (`deadline`),
and fails with the library's own timeout error once it has passed, so the
client's retries and fail-over end at the deadline too.

confluent-kafka's registry client builds its own httpx (or httpx2) session;
`bound` puts this deadline under its connection pool (httpcore's
`_network_backend`, the one seam the pool offers), whichever of the two the
client uses. Calls made outside a `deadline` block keep the client's timeouts.
"""
from __future__ import annotations

import importlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

_deadline: ContextVar[float | None] = ContextVar("mgstreams_http_deadline", default=None)


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Every bound client's network I/O inside this block ends within `seconds` in all."""
    token = _deadline.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _deadline.reset(token)


def bound(session: Any) -> bool:
    """Put the deadline under `session` (an httpx or httpx2 Client); False when its pool has no seam for it."""
    pool = getattr(getattr(session, "_transport", None), "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if pool is None or backend is None:
        return False
    core = importlib.import_module(type(pool).__module__.split(".")[0])   # httpcore or httpcore2
    if not isinstance(backend, _Backend):
        pool._network_backend = _Backend(backend, core)
    return True


def _left(timeout: float | None, error: type[Exception]) -> float | None:
    """The timeout for one socket operation: `timeout`, cut to what is left of the deadline; `error` past it."""
    until = _deadline.get()
    if until is None:
        return timeout
    left = until - time.monotonic()
    if left <= 0:
        raise error("the call's total deadline has passed")
    return left if timeout is None else min(timeout, left)


class _Stream:
    def __init__(self, inner: Any, core: Any):
        self._inner, self._core = inner, core

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, self._core.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout, self._core.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname,
                                             _left(timeout, self._core.ConnectTimeout)), self._core)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend:
    def __init__(self, inner: Any, core: Any):
        self._inner, self._core = inner, core

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> _Stream:
        return _Stream(self._inner.connect_tcp(host, port, _left(timeout, self._core.ConnectTimeout), local_address,
                                               socket_options), self._core)

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> _Stream:
        return _Stream(self._inner.connect_unix_socket(path, _left(timeout, self._core.ConnectTimeout),
                                                       socket_options), self._core)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)
