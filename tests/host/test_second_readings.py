"""Issue 44 through real hosts: values read the way their clients read them; the owner answered under load.

- a comma in `schema.registry.url` is a second registry to confluent-kafka's client: every member is checked at
  create, so `check` sends nothing (and no credentials) to a host the allowlist never judged; the other values a
  client reads as a list (librdkafka's broker list, the OAuth token endpoint, a Bolt sink) likewise;
- processes without the token, holding and reopening connections from many loopback addresses, cannot fail the
  owner's calls (bench/unauthenticated_load.py measures the same attack at full scale);
- a token that is not Latin-1 in /ui's query gets a 4xx and no traceback;
- a registry that drips its answer cannot hold a stream `running`: every registry call has a total deadline.
"""
from __future__ import annotations

import socket
from functools import partial

from configs import MERGE, stream_body
from drip_server import DripServer
from host_helpers import HostProcess
from host_helpers import http as host_client
from stream_helpers import wait_until

from bench.unauthenticated_load import TOKEN, measure

ALLOWED = {"MGSTREAMS_ALLOWED_HOSTS": "localhost,127.0.0.1"}
create_body = partial(stream_body, group="sr", transform=MERGE, sink="null://")


def test_every_member_of_a_value_a_client_reads_as_a_list_is_checked(tmp_path, kafka, listener):
    """The issue's attack: allowlist localhost,127.0.0.1; `http://127.0.0.1:1/,http://127.0.0.2:P` was accepted
    and `check` then sent the stream's Basic credentials to 127.0.0.2."""
    port, seen = listener
    host = HostProcess(tmp_path / "state", env=ALLOWED).start()
    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 1, payload=lambda i: b"\x00\x00\x00\x00\x07avro")
    registry = {"value.format": "avro", "credentials": {"schema.registry.basic.auth.user.info": "u:secret-pw"}}
    attempts = {
        "schema.registry.url": [f"http://127.0.0.1:1/,http://127.0.0.2:{port}",
                                f"http://127.0.0.1:1/,http://127.0.0.2:{port}/admin/config?x=",
                                f"http://127.0.0.1:1/;http://127.0.0.2:{port}"],
        "bootstrap_servers": [f"{kafka.bootstrap_servers} 127.0.0.2:{port}", f"{kafka.bootstrap_servers};127.0.0.2:{port}",
                              f"{kafka.bootstrap_servers},\n127.0.0.2:{port}"],
        "configs['sasl.oauthbearer.token.endpoint.url']": [f"http://127.0.0.1:1/,http://127.0.0.2:{port}/"],
        "sink": [f"bolt://127.0.0.1:1,127.0.0.2:{port}"],
    }
    accepted = []
    try:
        with host_client(host, timeout=60) as http:
            for field, values in attempts.items():
                for index, value in enumerate(values):
                    name = f"l{len(accepted)}_{index}_{abs(hash(field)) % 1000}"
                    if field == "schema.registry.url":
                        body = create_body(kafka, topic, name=name, **registry, **{field: value})
                    elif field.startswith("configs"):
                        body = create_body(kafka, topic, name=name,
                                           configs={"sasl.oauthbearer.token.endpoint.url": value})
                    else:
                        body = create_body(kafka, topic, name=name, **{field: value})
                    created = http.post("/streams", json=body)
                    if created.status_code < 300:   # accepted: do what the attack did
                        accepted.append((field, value))
                        http.post(f"/streams/{name}/check", json={"offset": "earliest", "limit": 1})
                        continue
                    assert created.status_code == 400 and created.json()["error"].startswith(field), created.text
                    assert "secret-pw" not in created.text
    finally:
        host.stop()
    assert not accepted and not seen, f"accepted: {accepted}; {len(seen)} connection(s) reached 127.0.0.2"


def test_unauthenticated_connections_from_many_addresses_do_not_fail_the_owners_calls(tmp_path):
    """300 connections from 20 loopback addresses, each asking GET /health every 2.5 s and reconnecting when
    closed, against a host serving 16 connections (64 pending): each of the owner's 15 calls, on a new connection,
    is answered. On the code before issue 44, 5 of 15 failed (the host closed the owner's new connection)."""
    host = HostProcess(tmp_path / "state", token=TOKEN, env={"MGSTREAMS_MAX_CONNECTIONS": "16"}).start()
    try:
        attack, answered, failures = measure(host.url, connections=300, addresses=20, interval=2.5, seconds=8,
                                             calls=15)
    finally:
        host.stop()
    assert not failures and len(answered) == 15, (failures, attack)
    assert attack.requests > 300, attack   # the load was there
    assert "Traceback" not in host.log()


def test_a_token_that_is_not_latin_1_gets_a_4xx_and_no_traceback(tmp_path):
    host = HostProcess(tmp_path / "state", generated_token=True).start()
    port = int(host.url.rsplit(":", 1)[1])
    try:
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                sock.sendall(b"GET /ui?token=%E2%82%AC HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                status = sock.makefile("rb").readline()
            assert status.startswith(b"HTTP/1.1 4"), status
    finally:
        host.stop()
    assert "Traceback" not in host.log() and "Error" not in host.log(), host.log()[-2000:]


def test_a_registry_that_drips_its_answer_cannot_hold_a_stream_running(tmp_path, kafka):
    """The registry sends its headers, then a byte a second, forever (a per-read timeout never fires): the stream
    ends in error naming the registry, within its deadline plus the batch's retries."""
    drip = DripServer(interval=1.0)
    host = HostProcess(tmp_path / "state").start()
    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 1, payload=lambda i: b"\x00\x00\x00\x00\x07avro")
    try:
        with host_client(host, timeout=60) as http:
            body = create_body(kafka, topic, name="dripped", restart="never", **{"value.format": "avro",
                                                                                 "schema.registry.url": drip.url})
            assert http.post("/streams", json=body).status_code == 201, host.log()
            assert http.put("/streams/dripped/start").status_code == 200
            state = wait_until(lambda: (s := http.get("/streams/dripped").json())["status"] == "error" and s, 120,
                               what="the stream in error", describe=lambda: http.get("/streams/dripped").json())
            assert "Schema Registry" in state["error"] and drip.url in state["error"], state
            assert drip.requests >= 1
    finally:
        host.stop()
        drip.close()
