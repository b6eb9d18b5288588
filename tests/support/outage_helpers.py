"""Every broker of the embedded cluster down while a stream runs: its error must show the outage in time."""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from stream_helpers import wait_until

BROKERS = (1, 2, 3)
SHOWN_WITHIN_S = 30.0


@contextmanager
def outage_shown(api, name: str, embedded_kafka, within_s: float = SHOWN_WITHIN_S) -> Iterator[dict]:
    """Take every broker down, wait until stream `name`'s error shows the outage (asserted within `within_s`,
    "all brokers down since ..."), yield its info; the brokers come back up on leaving."""
    for broker in BROKERS:
        embedded_kafka.broker_down(broker)
    down_at = time.monotonic()
    try:
        info = wait_until(lambda: (s := api.get(f"/streams/{name}").json())["error"] and s,
                          within_s + 10, what="the outage in the stream's error",
                          describe=lambda: api.get(f"/streams/{name}").json())
        shown_after = time.monotonic() - down_at
        assert shown_after < within_s, f"shown after {shown_after:.1f} s: {info}"
        assert info["error"].startswith("all brokers down since 20"), info
        yield info
    finally:
        for broker in BROKERS:
            embedded_kafka.broker_up(broker)
