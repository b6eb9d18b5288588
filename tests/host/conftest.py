"""The host tier: needs real `mgstreams serve` child processes (support/host_helpers.py), and Kafka."""
from __future__ import annotations

import socket
import threading
from pathlib import Path

import httpx
import pytest
from host_helpers import HostProcess
from lag_host import INTERVAL
from tiers import mark_tier


def pytest_collection_modifyitems(items):
    mark_tier(items, Path(__file__).parent)


@pytest.fixture(scope="module")
def lag_host(kafka, tmp_path_factory):
    with kafka.quick_rebalance():   # streams here join fresh groups; do not wait 3 s
        host = HostProcess(tmp_path_factory.mktemp("lag") / "state",
                           extra_args=("--lag-sample-interval", str(INTERVAL))).start()
        yield host
        host.stop()


@pytest.fixture(scope="module")
def api(lag_host):
    with httpx.Client(base_url=lag_host.url, timeout=30) as client:
        yield client


@pytest.fixture
def listener():
    """A TCP socket listening on 127.0.0.2 (another address of this machine) that records every connection."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.2", 0))
    server.listen(64)
    server.settimeout(0.2)
    seen: list[tuple] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, peer = server.accept()
            except OSError:
                continue
            seen.append(peer)
            conn.close()
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], seen
    stop.set()
    thread.join(5)
    server.close()
