"""An HTTP server that drips its answers: the headers at once, then one byte of the body every `interval`
seconds, never finishing (a registry behind a broken proxy, or an attacker holding a client). Loopback only."""
from __future__ import annotations

import socket
import threading


class DripServer:
    def __init__(self, interval: float = 1.0, host: str = "127.0.0.1"):
        self.interval = interval
        self.requests = 0
        self._stop = threading.Event()
        self._server = socket.create_server((host, 0))
        self._server.settimeout(0.2)
        self.url = f"http://{host}:{self._server.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                continue
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                self.requests += 1
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000000\r\n\r\n")
                while not self._stop.wait(self.interval):
                    conn.sendall(b" ")
            except OSError:
                return

    def close(self) -> None:
        self._stop.set()
        self._server.close()
