"""The host's allowlists hold for stored streams too, and a stream's consumer group is the host's own unless an
operator allows another (issue 26), through real hosts:

- a stream stored while its bootstrap servers, Bolt sink host or group were allowed is refused at start (and
  at the restore of a host's start) once the operator narrows the lists: a 400 naming the field, the stream in
  `error` saying why, no process;
- `consumer_group` naming another application's group is refused (400 naming it) when the operator sets
  $MGSTREAMS_ALLOWED_GROUPS, and by default on a host listening beyond loopback.
"""
from __future__ import annotations

import secrets
import uuid
from functools import partial

import httpx
import pytest
from configs import stream_body, stream_config
from host_helpers import HostProcess
from stream_helpers import wait_until

from stream_registry.errors import ConfigError
from stream_registry.group_policy import ALLOWED_GROUPS_ENV, GroupPolicy

# the streams sent to the host: no consumer group unless one is given (the host's default: mgstreams_<name>)
create_body = partial(stream_body, group=None, sink="null://")


@pytest.mark.parametrize("environ, loopback, allowed, refused", [
    ({}, True, ["other_app", "mgstreams_orders", None], []),
    ({}, False, ["mgstreams_orders", "mgstreams_x", None], ["other_app", "payments-consumer", "mgstreams"]),
    ({ALLOWED_GROUPS_ENV: "team_*, audit"}, True, ["team_a", "audit", "mgstreams_orders", None],
     ["other_app", "audit2", "team"]),
    ({ALLOWED_GROUPS_ENV: "*"}, False, ["other_app", None], []),
])
def test_group_policy(environ, loopback, allowed, refused):
    policy = GroupPolicy.from_env(environ, loopback=loopback)
    for group in allowed:
        policy.check(stream_config(consumer_group=group))
    for group in refused:
        with pytest.raises(ConfigError, match=rf"^consumer_group: '{group}' is not a group this host's streams may "
                                              rf"use .*\$MGSTREAMS_ALLOWED_GROUPS"):
            policy.check(stream_config(consumer_group=group))


def test_a_foreign_group_is_refused_when_the_operator_says_so(kafka, tmp_path):
    topic = kafka.new_topic(partitions=1)
    with HostProcess(tmp_path / "state", env={ALLOWED_GROUPS_ENV: "team_*"}) as host:
        api = httpx.Client(base_url=host.url, timeout=60)
        refused = api.post("/streams", json=create_body(kafka, topic, consumer_group="billing_service", name="a"))
        assert refused.status_code == 400 and refused.json()["error"].startswith(
            "consumer_group: 'billing_service' is not a group this host's streams may use (allowed: mgstreams_*, "
            "team_*)"), refused.text
        assert api.get("/streams").json() == []
        assert api.post("/streams", json=create_body(kafka, topic, consumer_group="team_b", name="b")).status_code \
            == 201
        assert api.post("/streams", json=create_body(kafka, topic, name="c")).json()["consumer_group"] == \
            "mgstreams_c"


def test_a_host_beyond_loopback_keeps_streams_to_its_own_groups(kafka, tmp_path):
    """The default beyond loopback: only mgstreams_* (a network neighbour cannot move another application)."""
    topic = kafka.new_topic(partitions=1)
    token = secrets.token_urlsafe(32)
    with HostProcess(tmp_path / "state", token=token, extra_args=("--listen", "0.0.0.0:0")) as host:
        api = httpx.Client(base_url=host.url, timeout=60, headers={"Authorization": f"Bearer {token}"})
        refused = api.post("/streams", json=create_body(kafka, topic, consumer_group="billing_service", name="a"))
        assert refused.status_code == 400 and refused.json()["error"].startswith(
            "consumer_group: 'billing_service' is not a group this host's streams may use (allowed: mgstreams_*)"), \
            refused.text
        assert api.post("/streams", json=create_body(kafka, topic, name="b")).status_code == 201


def test_stored_streams_are_checked_again_at_start(kafka, tmp_path):
    """Streams stored under wider lists: the narrowed host refuses to start them, naming the field."""
    topic = kafka.new_topic(partitions=1)
    state = tmp_path / "state"
    group = f"qa_{uuid.uuid4().hex[:8]}"
    with kafka.quick_rebalance(), HostProcess(state) as wide:
        api = httpx.Client(base_url=wide.url, timeout=60)
        for body in (create_body(kafka, topic, name="brokers"),
                     create_body(kafka, topic, sink="bolt://localhost:7687", name="bolted", check_sink=False),
                     create_body(kafka, topic, consumer_group=group, name="foreign")):
            assert api.post("/streams", json=body).status_code == 201, body
        assert api.put("/streams/brokers/start").status_code == 200   # desired running: restored at the next start
        wait_until(lambda: api.get("/streams/brokers").json()["status"] == "running", what="running")
    kafka_host = kafka.bootstrap_servers.split(",")[0].rpartition(":")[0]

    with HostProcess(state, env={"MGSTREAMS_ALLOWED_HOSTS": "kafka.internal"}) as narrow:
        api = httpx.Client(base_url=narrow.url, timeout=60)
        restored = api.get("/streams/brokers").json()
        reason = f"bootstrap_servers: host '{kafka_host}' is not one the operator allows (kafka.internal;"
        assert (restored["status"], restored["pid"]) == ("error", None), restored
        assert restored["error"].startswith(f"not started: {reason}"), restored
        started = api.put("/streams/brokers/start")
        assert started.status_code == 400 and started.json()["error"].startswith(reason), started.text
        assert "stream brokers: start refused: bootstrap_servers: " in narrow.log()

    with HostProcess(state, env={"MGSTREAMS_ALLOWED_HOSTS": f"{kafka_host}",
                                 ALLOWED_GROUPS_ENV: "team_*"}) as narrow:
        api = httpx.Client(base_url=narrow.url, timeout=60)
        started = api.put("/streams/bolted/start")
        assert started.status_code == 400 and started.json()["error"].startswith(
            "sink: host 'localhost' is not one the operator allows"), started.text
        started = api.put("/streams/foreign/start")
        assert started.status_code == 400 and started.json()["error"].startswith(
            f"consumer_group: '{group}' is not a group this host's streams may use"), started.text
        for name in ("bolted", "foreign"):
            info = api.get(f"/streams/{name}").json()
            assert (info["status"], info["pid"]) == ("error", None) and info["error"].startswith("not started: "), info
