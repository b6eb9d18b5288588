"""A host sampling lag every 0.2 s, and its API as the lag tests read it (tests/host/test_lag*.py; the
`lag_host` and `api` fixtures are in tests/host/conftest.py)."""
from __future__ import annotations

import json

from configs import stream_body
from stream_helpers import FAST_REJOIN, wait_until

INTERVAL = 0.2          # the host's sample interval here: a 10-sample window spans 2 s


def create(api, kafka, name: str, topic: str, **fields) -> None:
    body = stream_body(kafka, topic, name=name, group="lag",
                       **{"sink": "null://", "batch_interval_ms": 20, "configs": FAST_REJOIN, **fields})
    response = api.post("/streams", json=body)
    assert response.status_code == 201, response.text
    assert api.put(f"/streams/{name}/start").status_code == 200


def lag_of(api, name: str) -> dict:
    response = api.get(f"/streams/{name}/lag")
    assert response.status_code == 200, response.text
    return response.json()


def wait_lag(api, name: str, condition, what: str, timeout: float = 30.0) -> dict:
    seen = {}

    def check():
        seen["lag"] = lag_of(api, name)
        return condition(seen["lag"])
    try:
        wait_until(check, timeout=timeout, interval=INTERVAL / 2, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last answer: {json.dumps(seen.get('lag'))[:1500]}") from None
    return seen["lag"]
