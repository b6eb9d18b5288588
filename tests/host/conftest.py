"""The host tier: needs real `mgstreams serve` child processes (support/host_helpers.py), and Kafka."""
from __future__ import annotations

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
