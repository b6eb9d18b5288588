"""Connection limits uvicorn lacks, so that connections without the token cannot starve the owner's.

uvicorn closes a connection left idle after a response (its keep-alive timeout),
but a client that connects and sends nothing, or trickles its headers, keeps its
connection forever; and any local process can open connections without knowing
the token. Here:

- a connection is *pending* until it sends a request carrying the host's token
  (any request, on a host serving without one). A pending connection must do so
  within `auth_timeout` seconds of connecting, or it is closed: answers without
  the token (`/health`, a 401) do not extend that deadline;
- pending connections have a pool of their own, `PENDING_FACTOR` times
  `max_connections`: they never take the `max_connections` kept for
  authenticated ones. Past the pool, the oldest pending connection that has
  proved to be no owner's is closed to make room for each new one: one whose
  request came without the token (answered or being answered), or one silent
  for `IDLE_PROOF_S` with no bytes waiting to be read; first those of a peer
  address holding more than `PENDING_PER_PEER` (loopback addresses included:
  127.0.0.0/8 is many addresses of every local process). A connection just
  accepted, or one whose request waits to be read, is never closed for room: the
  owner's new connection sends its request at once, and a loaded host may not
  have read it yet. So a burst of fresh connections overflows the pool (until
  they prove themselves), up to `OVERFLOW_FACTOR` times it, bounded by half the
  process's file descriptor limit;
- an authenticated connection completes each request's headers within
  `header_timeout` seconds of its last response;
- past the overflow, with nothing pending to close, a new connection is answered
  503 (naming the cap) and closed.
"""
from __future__ import annotations

import asyncio
import fcntl
import hmac
import json
import resource
import struct
import termios
from collections import Counter
from urllib.parse import parse_qsl

from uvicorn.protocols.http.h11_impl import H11Protocol

MAX_CONNECTIONS_ENV = "MGSTREAMS_MAX_CONNECTIONS"
AUTH_TIMEOUT_S = 3.0         # a new connection shows the token (sends an authenticated request) within this
PENDING_FACTOR = 4           # the pending pool, in multiples of max_connections
PENDING_PER_PEER = 16        # pending connections past which a peer address's go first
OVERFLOW_FACTOR = 16         # fresh pending connections, in multiples of the pool, before new ones are refused
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
        # the token as the API's check reads it (UTF-8): a '%E2%82%AC' is no token, never an exception here
        scheme, given = b"bearer", dict(parse_qsl(query)).get("token", "").encode("utf-8", "replace")
    return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), expected)


def guarded_protocol(header_timeout: float, max_connections: int, token: str | None = None,
                     auth_timeout: float = AUTH_TIMEOUT_S) -> type[H11Protocol]:
    """uvicorn's h11 protocol with these limits (uvicorn.Config(http=...) takes a class)."""
    expected = token.encode() if token else None
    max_pending = max_connections * PENDING_FACTOR
    per_peer = min(PENDING_PER_PEER, max_pending)
    overflow = max(2 * max_pending, min(OVERFLOW_FACTOR * max_pending,
                                        resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 2))
    pending: dict[H11Protocol, str] = {}     # connection -> peer address, oldest first
    by_peer: Counter[str] = Counter()

    class GuardedH11Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _peer = ""
        _spoken = False    # it has sent bytes
        _born = 0.0        # loop time it connected
        _answered = False  # it had an answer without showing the token

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._peer = self.client[0] if self.client else ""
            self._born = self.loop.time()
            pending[self] = self._peer
            by_peer[self._peer] += 1
            if len(pending) > max_pending:   # room from one that proved to be no owner's, a crowded peer's first
                self._make_room()
            if len(pending) > overflow and not self._make_room():
                self._refuse(transport)
                return
            self._arm(auth_timeout)

        def data_received(self, data: bytes) -> None:
            self._spoken = True
            super().data_received(data)
            if self in pending and self.cycle is not None and (
                    expected is None or bearer_token_shown(self.scope, expected)):
                self._authenticated()
                self._disarm()
            if self in pending:
                return   # its deadline runs from its connection, whatever it sends
            if self._waiting():
                if self._deadline is None:
                    self._arm(header_timeout)
            else:
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self in pending:   # answered without the token: no owner's; its deadline from connecting stands
                self._answered = True
                if self.loop.time() - self._born >= auth_timeout and not self.transport.is_closing():
                    self.transport.close()
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

        def _provably_no_owner(self, now: float) -> bool:
            """Its request came without the token, or it was silent for IDLE_PROOF_S with nothing waiting."""
            if self._answered or (self._spoken and self.cycle is not None):
                return True
            return not self._spoken and now - self._born >= IDLE_PROOF_S and not _bytes_waiting(self.transport)

        def _make_room(self) -> bool:
            """Close the oldest pending connection other than this one that proved to be no owner's, one of a
            peer over PENDING_PER_PEER first; False if there is none."""
            now = self.loop.time()
            provable = [other for other in pending if other is not self and other._provably_no_owner(now)]
            victim = next((other for other in provable if by_peer[other._peer] > per_peer),
                          provable[0] if provable else None)
            if victim is None:
                return False
            victim._authenticated()
            victim._disarm()
            victim.transport.close()
            victim.connections.discard(victim)   # counted out now; uvicorn's connection_lost follows
            return True

        def _refuse(self, transport) -> None:
            body = json.dumps({"error": f"connections: {len(self.connections) - 1} open, none of them idle, the most "
                                        f"this host serves at once (${MAX_CONNECTIONS_ENV} {max_connections}, "
                                        f"and {overflow} yet to show the token); try again shortly"}).encode()
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


def _bytes_waiting(transport) -> bool:
    """Whether bytes the peer sent wait in the socket, not yet read by the loop (FIONREAD)."""
    sock = transport.get_extra_info("socket")
    try:
        return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0] > 0
    except (OSError, AttributeError, ValueError):
        return True   # unknown: treat it as possibly the owner's
