"""Loopback ports for tests: one the OS has just handed out and nothing listens on (yet)."""
from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port free a moment ago: for a server a test starts next, or as an address where nothing
    listens (a connection there is refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
