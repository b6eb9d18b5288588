"""Connection limits uvicorn lacks, so that connections without the token cannot starve the owner's.

uvicorn closes a connection left idle after a response (its keep-alive timeout),
but a client that connects and sends nothing, or trickles its headers, keeps its
connection forever; and any local process can open connections without knowing
the token. Here:

- a connection is *pending* until it sends a request carrying the host's token
  (any request, on a host serving without one). A pending connection must do so
  within `auth_timeout` seconds of connecting (or of its last answer), or it is
  closed;
- pending connections have a pool of their own, `PENDING_FACTOR` times
  `max_connections`: they never take the `max_connections` kept for
  authenticated ones. Past the pool, the oldest pending connection that has
  sent nothing for `IDLE_PROOF_S` is closed to make room for the new one, so a
  crowd of idle connections goes first, and a new connection, which sends its
  request at once, is never closed before it could. Fresh connections may
  overflow the pool up to twice its size; past that the oldest silent one goes. One remote peer address
  may hold at most `PENDING_PER_PEER` pending connections (its oldest goes
  first); loopback peers are every local process, so the pool bounds them;
- an authenticated connection completes each request's headers within
  `header_timeout` seconds of its last response;
- past both, with nothing pending to close, a new connection is answered 503
  (naming the cap) and closed.
"""
from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
from collections import Counter
from urllib.parse import parse_qsl

from uvicorn.protocols.http.h11_impl import H11Protocol

MAX_CONNECTIONS_ENV = "MGSTREAMS_MAX_CONNECTIONS"
AUTH_TIMEOUT_S = 3.0         # a new connection shows the token (sends an authenticated request) within this
PENDING_FACTOR = 4           # the pending pool, in multiples of max_connections
PENDING_PER_PEER = 16        # pending connections one remote peer address may hold
IDLE_PROOF_S = 0.25          # silent this long after connecting: idle, the first to be closed past the pool


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
    max_pending = max_connections * PENDING_FACTOR
    per_peer = min(PENDING_PER_PEER, max_pending)
    pending: dict[H11Protocol, str] = {}     # connection -> peer address, oldest first
    by_peer: Counter[str] = Counter()

    class GuardedH11Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _peer = ""
        _spoken = False    # it has sent bytes
        _born = 0.0        # loop time it connected

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._peer = self.client[0] if self.client else ""
            self._born = self.loop.time()
            pending[self] = self._peer
            by_peer[self._peer] += 1
            if by_peer[self._peer] > per_peer and not _loopback(self._peer) and not self._make_room(self._peer):
                self._refuse(transport)
                return
            # past the pool: close one that has proved idle; a crowd of fresh ones may overflow it up to twice
            if len(pending) > max_pending and not self._make_room(None, idle_for=IDLE_PROOF_S) \
                    and len(pending) > 2 * max_pending and not self._make_room(None):
                self._refuse(transport)
                return
            if len(self.connections) > max_connections + 2 * max_pending and not self._make_room(None):
                self._refuse(transport)
                return
            self._arm(auth_timeout)

        def data_received(self, data: bytes) -> None:
            self._spoken = True
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

        def _make_room(self, peer: str | None, idle_for: float | None = None) -> bool:
            """Close the oldest pending connection (of `peer`, when given) other than this one: with `idle_for`,
            one that has sent nothing for that long; else one that has sent nothing, or the oldest between
            requests. False if there is none."""
            now = self.loop.time()
            candidates = [other for other, other_peer in pending.items()
                          if other is not self and (peer is None or other_peer == peer) and other._waiting()]
            silent = (other for other in candidates if not other._spoken
                      and (idle_for is None or now - other._born >= idle_for))
            victim = next(silent, None) or (next(iter(candidates), None) if idle_for is None else None)
            if victim is None:
                return False
            victim._authenticated()
            victim.transport.close()
            victim.connections.discard(victim)   # counted out now; uvicorn's connection_lost follows
            return True

        def _refuse(self, transport) -> None:
            body = json.dumps({"error": f"connections: {len(self.connections) - 1} open, none of them idle, the most "
                                        f"this host serves at once (${MAX_CONNECTIONS_ENV} {max_connections}, "
                                        f"and {max_pending} yet to show the token); try again shortly"}).encode()
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


def _loopback(peer: str) -> bool:
    try:
        return ipaddress.ip_address(peer).is_loopback
    except ValueError:
        return False
