"""Connection limits uvicorn lacks, so that connections without the token cannot starve the owner's.

uvicorn closes a connection left idle after a response (its keep-alive timeout),
but a client that connects and sends nothing, or trickles its headers, keeps its
connection forever; and any local process can open connections without knowing
the token. Here:

- a connection is *pending* until it sends a request carrying the host's token
  (any request, on a host serving without one). A pending connection must do so
  within `auth_timeout` seconds of connecting, or it is closed;
- pending connections may hold at most three quarters of `max_connections`, and
  one peer address at most `PENDING_PER_PEER` of them: past either, the oldest
  idle pending connection (of that peer) is closed to make room for the new one,
  so a crowd of idle connections is always the first to go and the rest stays
  for authenticated requests;
- an authenticated connection completes each request's headers within
  `header_timeout` seconds of its last response;
- past `max_connections` open connections with none pending to close, a new one
  is answered 503 (naming the cap) and closed.
"""
from __future__ import annotations

import asyncio
import hmac
import json
from collections import Counter
from urllib.parse import parse_qsl

from uvicorn.protocols.http.h11_impl import H11Protocol

MAX_CONNECTIONS_ENV = "MGSTREAMS_MAX_CONNECTIONS"
AUTH_TIMEOUT_S = 3.0         # a new connection shows the token (sends an authenticated request) within this
PENDING_PER_PEER = 16        # pending connections one peer address may hold


def bearer_token_shown(scope: dict, expected: bytes) -> bool:
    """Whether a request's scope carries `expected` as its bearer token (or as /ui's `token` parameter)."""
    authorization = b""
    for key, value in scope.get("headers", ()):
        if key.lower() == b"authorization":
            authorization = value
    scheme, _, given = authorization.partition(b" ")
    if not scheme and scope.get("path") == "/ui":
        query = scope.get("query_string", b"").decode("latin-1")
        scheme, given = b"bearer", dict(parse_qsl(query)).get("token", "").encode("latin-1")
    return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), expected)


def guarded_protocol(header_timeout: float, max_connections: int, token: str | None = None,
                     auth_timeout: float = AUTH_TIMEOUT_S) -> type[H11Protocol]:
    """uvicorn's h11 protocol with these limits (uvicorn.Config(http=...) takes a class)."""
    expected = token.encode() if token else None
    max_pending = max(1, max_connections * 3 // 4)
    per_peer = min(PENDING_PER_PEER, max_pending)
    pending: dict[H11Protocol, str] = {}     # connection -> peer address, oldest first
    by_peer: Counter[str] = Counter()

    class GuardedH11Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _peer = ""

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._peer = self.client[0] if self.client else ""
            pending[self] = self._peer
            by_peer[self._peer] += 1
            if by_peer[self._peer] > per_peer:
                self._make_room(self._peer)
            if len(pending) > max_pending or len(self.connections) > max_connections:
                self._make_room(None)
            if len(self.connections) > max_connections or len(pending) > max_pending:
                self._refuse(transport)
                return
            self._arm(auth_timeout)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self in pending and self.cycle is not None and (
                    expected is None or bearer_token_shown(self.scope, expected)):
                self._authenticated()
            if self._waiting():
                if self._deadline is None:
                    self._arm(auth_timeout if self in pending else header_timeout)
            else:
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self in pending:   # answered without the token: it still has to show it in time
                self._arm(auth_timeout)
            else:
                self._disarm()    # uvicorn's keep-alive timeout takes over until the next bytes arrive

        def connection_lost(self, exc) -> None:
            self._disarm()
            self._authenticated()
            super().connection_lost(exc)

        # -- pending connections ---------------------------------------------------------
        def _authenticated(self) -> None:
            peer = pending.pop(self, None)
            if peer is not None:
                by_peer[peer] -= 1
                if by_peer[peer] <= 0:
                    del by_peer[peer]

        def _make_room(self, peer: str | None) -> None:
            """Close the oldest idle pending connection (of `peer`, when given) other than this one."""
            for other, other_peer in list(pending.items()):
                if other is not self and (peer is None or other_peer == peer) and other._waiting():
                    other._authenticated()
                    other.transport.close()
                    other.connections.discard(other)   # counted out now; uvicorn's connection_lost follows
                    return

        def _refuse(self, transport) -> None:
            body = json.dumps({"error": f"connections: {len(self.connections) - 1} open, the most this host "
                                        f"serves at once (${MAX_CONNECTIONS_ENV} {max_connections}); "
                                        f"try again shortly"}).encode()
            self._authenticated()
            transport.write(b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                            b"connection: close\r\ncontent-length: " + str(len(body)).encode()
                            + b"\r\n\r\n" + body)
            transport.close()

        # -- deadlines ---------------------------------------------------------------------
        def _waiting(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _arm(self, seconds: float) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(seconds, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if self._waiting() and not self.transport.is_closing():
                self.transport.close()

    return GuardedH11Protocol
