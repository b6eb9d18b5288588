"""The browser boundary: what a web page the operator visits can make the host do (nothing).

A page can send a request to 127.0.0.1 (CSRF) or rebind its own name to it
(DNS rebinding). Three checks, before the token and before any handler:

- the Host header names this host: an IP literal, `localhost` on a loopback
  listen, or a name the operator configured; anything else is 421 (a rebound
  name carries the attacker's name in Host);
- an Origin header, when present, is this host's own origin; anything else
  (another site, `null`) is 403;
- a body is `Content-Type: application/json`, which a page cannot send
  cross-origin without a preflight the host never answers; anything else is 415.
"""
from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable
from urllib.parse import urlsplit

SERVER_NAMES_ENV = "MGSTREAMS_SERVER_NAMES"
_BODY_METHODS = {b"POST", b"PUT", b"PATCH", b"DELETE"}


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
        return True
    except ValueError:
        return False


def _split_host(value: str) -> tuple[str, str]:
    """(host, port) of a Host header value; the port is '' when absent."""
    value = value.strip().lower()
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        return host, rest.lstrip(":")
    host, _, port = value.rpartition(":") if value.count(":") == 1 else (value, "", "")
    return host, port


class BrowserBoundary:
    """ASGI middleware refusing foreign Host (421), foreign Origin (403) and non-JSON bodies (415)."""

    def __init__(self, app, *, names: Iterable[str] = (), loopback: bool = True):
        self.app = app
        self.names = {n.strip().lower().rstrip(".") for n in names if n.strip()}
        if loopback:
            self.names.add("localhost")

    def host_allowed(self, host: str) -> bool:
        host = host.rstrip(".")
        return bool(host) and (_is_ip(host) or host in self.names)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers: dict[bytes, list[str]] = {}
        for key, value in scope.get("headers", ()):
            headers.setdefault(key.lower(), []).append(value.decode("latin-1"))
        hosts = headers.get(b"host", [])
        if len(hosts) != 1 or not self.host_allowed(_split_host(hosts[0])[0]):
            shown = hosts[0][:100] if hosts else "(none)"
            return await _refuse(send, 421, f"host: {shown!r} is not a name of this host; configure it with "
                                            f"--server-name (or ${SERVER_NAMES_ENV}) to serve it")
        for origin in headers.get(b"origin", []):
            if not self._same_origin(origin, hosts[0]):
                return await _refuse(send, 403, f"origin: {origin[:100]!r} is not this host's origin; "
                                                f"the API takes no requests from web pages of other sites")
        if scope["method"].encode() in _BODY_METHODS and _has_body(headers):
            kind = (headers.get(b"content-type") or [""])[0].split(";")[0].strip().lower()
            if kind != "application/json":
                return await _refuse(send, 415, f"content-type: a body must be application/json, "
                                                f"got {kind[:100] or '(none)'!r}")
        return await self.app(scope, receive, send)

    def _same_origin(self, origin: str, host_header: str) -> bool:
        try:
            parts = urlsplit(origin)
            origin_host, origin_port = (parts.hostname or ""), parts.port
        except ValueError:
            return False
        host, port = _split_host(host_header)
        if parts.scheme != "http" or not self.host_allowed(origin_host) or origin_host != host:
            return False
        return (str(origin_port) if origin_port is not None else "80") == (port or "80")


def _has_body(headers: dict) -> bool:
    length = (headers.get(b"content-length") or ["0"])[0].strip()
    return b"transfer-encoding" in headers or not length.isdigit() or int(length) > 0


async def _refuse(send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
