"""A fixed loopback port in front of a broker the mock cluster listens for on a port of its own choosing.

librdkafka's mock brokers bind ephemeral ports, so `mgstreams kafka` restarted came back at another address and
every stream pointed at the old one. `mgstreams kafka --port P` listens on P (P+1, ... for more brokers), copies
bytes both ways to the mock broker, and has the cluster advertise P in its metadata: a restarted cluster is at the
same address, and streams reconnect to it as they would to a real broker that came back.
"""
from __future__ import annotations

import contextlib
import socket
import threading

from stream_registry.errors import StreamError

CHUNK = 65536


class PortForward:
    """127.0.0.1:`port` forwarded to 127.0.0.1:`target`, until close()."""

    def __init__(self, port: int, target: int):
        self.port, self.target = port, target
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # rebinds at once after a restart
        try:
            self._listener.bind(("127.0.0.1", port))
        except OSError as exc:
            self._listener.close()
            raise StreamError(f"port: cannot listen on 127.0.0.1:{port}: {exc.strerror}") from None
        self._listener.listen(64)
        self._closed = threading.Event()
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name=f"forward-{port}", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._open |= {client, upstream}
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(CHUNK):
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):   # one side gone: the other goes too, as a broker's connection would
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            opened, self._open = list(self._open), set()
        for sock in opened:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
