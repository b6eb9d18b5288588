"""Connection limits uvicorn lacks: a deadline for a request's headers and a cap on open connections.

uvicorn closes a connection left idle after a response (its keep-alive timeout),
but a client that connects and sends nothing, or trickles its headers, keeps
its connection forever. Here a connection must complete a request's headers
within `header_timeout` seconds of connecting or of its last response, and past
`max_connections` open connections a new one is answered 503 (naming the cap)
and closed.
"""
from __future__ import annotations

import asyncio
import json

from uvicorn.protocols.http.h11_impl import H11Protocol

MAX_CONNECTIONS_ENV = "MGSTREAMS_MAX_CONNECTIONS"


def guarded_protocol(header_timeout: float, max_connections: int) -> type[H11Protocol]:
    """uvicorn's h11 protocol with these limits (uvicorn.Config(http=...) takes a class)."""

    class GuardedH11Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                body = json.dumps({"error": f"connections: {len(self.connections) - 1} open, the most this host "
                                            f"serves at once (${MAX_CONNECTIONS_ENV} {max_connections}); "
                                            f"try again shortly"}).encode()
                transport.write(b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                                b"connection: close\r\ncontent-length: " + str(len(body)).encode()
                                + b"\r\n\r\n" + body)
                transport.close()
                return
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._waiting():
                if self._deadline is None:
                    self._arm()
            else:
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._disarm()      # uvicorn's keep-alive timeout takes over until the next bytes arrive

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _waiting(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(header_timeout, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if self._waiting() and not self.transport.is_closing():
                self.transport.close()

    return GuardedH11Protocol
