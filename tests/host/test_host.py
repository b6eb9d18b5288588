"""The stream host (`mgstreams serve`) through its HTTP API, as curl or any client sees it.

Every test talks to a real host in a child process: routes and their JSON
shapes, errors (400/401/404/405/409, never a 500 or a traceback), secrets kept
out of every output, the token, one host per state directory, SIGTERM (commit,
close, exit 0) and SIGKILL (the next host resumes the running streams).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from functools import partial

import configs
import httpx
import pytest
from broker_support import LEAVES_AT_ONCE
from confluent_kafka import OFFSET_INVALID, Consumer, TopicPartition
from host_helpers import HostProcess, http
from paths import ROOT
from stream_helpers import FAST_REJOIN, by_partition, delivered_from_file, wait_until

STREAM_FIELDS = {"name", "topics", "consumer_group", "bootstrap_servers", "transform", "sink", "status", "error",
                 "configs", "credentials", "batch_size", "batch_interval_ms", "restart", "pid", "rss_bytes", "restarts",
                 "delivery", "errors_tolerance", "dead_letter_topic", "dead_lettered", "skipped",
                 "records", "batches", "batch_seconds_sum", "batch_seconds_buckets", "detail", "tasks", "pids",
                 "key_format", "value_format", "schema_registry_url", "transform_options", "records_lost",
                 "records_lost_unacknowledged", "cluster_unreachable_since", "engine", "spark"}
OFFSETS_FIELDS = {"topic", "partition", "committed_offset", "position", "log_start_offset", "log_end_offset", "lag",
                  "assigned", "stored_offset", "resume_offset", "task", "last_known_lag", "last_known_at",
                  "last_known_age_s"}
CHANGE_FIELDS = {"topic", "partition", "previous_offset", "offset", "status", "message", "change_id"}
HISTORY_FIELDS = {"changed_at", "topic", "partition", "previous_offset", "offset", "status", "message", "change_id"}


# each stream writes a cypherl file
stream_body = partial(configs.stream_body, group="host", batch_interval_ms=20)


def metric(text: str, name: str, stream: str) -> float | None:
    match = re.search(rf'^{name}\{{stream="{stream}"\}} (\S+)$', text, re.M)
    return float(match.group(1)) if match else None


def committed(kafka, group_id: str, topic: str, partitions: int, configs: dict | None = None) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": group_id, **(configs or {})})
    try:
        return {tp.partition: tp.offset
                for tp in consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)}
    finally:
        consumer.close()


def test_every_route_with_its_shapes_and_no_secret_anywhere(host, kafka, tmp_path):
    password, key_password = f"pw-{uuid.uuid4().hex}", f"kp-{uuid.uuid4().hex}"
    topic = kafka.new_topic(partitions=3)
    kafka.produce(topic, 30, partitions=3)
    out = tmp_path / "out.cypherl"
    seen: list[str] = []   # every response body, searched for secrets at the end

    with http(host) as api:
        def call(method, path, expect, **kwargs):
            response = api.request(method, path, **kwargs)
            seen.append(response.text)
            assert response.status_code == expect, response.text
            return response.json() if response.headers["content-type"].startswith("application/json") \
                else response.text

        assert call("GET", "/health", 200)["status"] == "healthy"
        assert call("GET", "/streams", 200) == []
        body = stream_body(kafka, topic, out, credentials={"sasl.password": password},
                           configs={"ssl.key.password": key_password, "fetch.wait.max.ms": 50})
        created = call("POST", "/streams", 201, json=body)
        assert set(created) == STREAM_FIELDS
        assert created["status"] == "created" and created["topics"] == [topic] and created["error"] is None
        assert created["consumer_group"] == body["consumer_group"]
        assert created["transform"] == "stream_registry.builtin_transformations.merge_messages"   # the default
        assert created["credentials"] == {"sasl.password": "****"}
        assert created["configs"] == {"ssl.key.password": "****", "fetch.wait.max.ms": 50}
        assert call("GET", "/streams/orders", 200) == created
        assert call("GET", "/streams", 200) == [created]
        assert call("POST", "/streams", 409, json=body) == {"error": "name: a stream named 'orders' already exists"}
        call("POST", "/streams", 400, json={**body, "name": "other", "configs": {"ssl.key.password": [key_password]}})

        rows = call("GET", "/streams/orders/offsets", 200)
        assert [set(r) for r in rows] == [OFFSETS_FIELDS] * 3
        assert [(r["topic"], r["partition"], r["committed_offset"], r["log_end_offset"], r["assigned"])
                for r in rows] == [(topic, p, None, 10, False) for p in range(3)]

        planned = call("PATCH", "/streams/orders/offsets", 200, json={"offset": 4, "dry_run": True})
        assert [set(c) for c in planned] == [CHANGE_FIELDS] * 3
        assert {(c["offset"], c["status"]) for c in planned} == {(4, "planned")}
        pending = call("PATCH", "/streams/orders/offsets", 200, json={"offset": -1, "timeout_ms": 5000})
        assert {(c["partition"], c["offset"], c["status"]) for c in pending} == {(p, 0, "pending") for p in range(3)}
        assert call("GET", "/streams/orders/history", 200) == []    # nothing applied until it runs

        started = call("PUT", "/streams/orders/start", 200)
        assert started["status"] in ("starting", "running")
        conflict = call("PUT", "/streams/orders/start", 409)
        assert conflict["error"].startswith("name: stream 'orders' is already ")
        wait_until(lambda: len(delivered_from_file(out)) >= 30, timeout=60, what="30 messages in the sink")
        assert {p: sorted(set(o)) for (_, p), o in by_partition(delivered_from_file(out)).items()} == \
            {p: list(range(10)) for p in range(3)}
        wait_until(lambda: metric(call("GET", "/metrics", 200), "mgstreams_stream_up", "orders") == 1.0,
                   what="mgstreams_stream_up 1 for the running stream")
        assert call("GET", "/streams/orders", 200)["status"] == "running"

        history = call("GET", "/streams/orders/history", 200)
        assert [set(h) for h in history] == [HISTORY_FIELDS] * 3
        assert sorted((h["partition"], h["offset"], h["status"]) for h in history) == \
            [(p, 0, "applied") for p in range(3)]
        assert len(call("GET", "/streams/orders/history", 200, params={"limit": 1})) == 1

        wait_until(lambda: [r["committed_offset"] for r in call("GET", "/streams/orders/offsets", 200)]
                   == [10, 10, 10], what="offsets committed")
        rows = call("GET", "/streams/orders/offsets", 200)
        assert [(r["lag"], r["assigned"]) for r in rows] == [(0, True)] * 3

        stopped = call("PUT", "/streams/orders/stop", 200)
        assert stopped["status"] == "stopped"
        assert call("PUT", "/streams/orders/stop", 200)["status"] == "stopped"     # idempotent
        assert metric(call("GET", "/metrics", 200), "mgstreams_stream_up", "orders") == 0.0
        dropped = call("DELETE", "/streams/orders", 200)
        assert dropped["name"] == "orders" and dropped["status"] == "stopped"
        call("GET", "/streams/orders", 404)
        assert call("GET", "/streams", 200) == []

    assert host.terminate() == 0
    outputs = "\n".join(seen) + "\n" + host.log()
    for secret in (password, key_password):
        assert secret not in outputs


def test_bad_requests_are_400_naming_the_field_and_change_nothing(host, kafka, tmp_path):
    topic = kafka.new_topic(partitions=2)
    out = tmp_path / "out.cypherl"
    secret = f"pw-{uuid.uuid4().hex}"
    good = stream_body(kafka, topic, out)
    without = lambda field: {k: v for k, v in good.items() if k != field}  # noqa: E731
    creates = [
        (b"{not json", ["body: not valid JSON"]),
        (b"[1, 2]", ["body: expected a JSON object, got list"]),
        (b"[" * 50_000 + b"]" * 50_000, ["body: not valid JSON"]),
        ({**good, "colour": "red"}, ["body: unknown field 'colour'"]),
        (without("name"), ["name: required"]),
        (without("topics"), ["topics: required"]),
        (without("bootstrap_servers"), ["bootstrap_servers: required"]),
        ({**good, "name": "bad name"}, ["name: 'bad name'"]),
        ({**good, "topics": 5}, ["topics:", "int"]),
        ({**good, "topics": [5]}, ["topics: 5 "]),
        ({**good, "topics": ["no_such_topic_here"]}, ["topics:", "'no_such_topic_here'"]),
        ({**good, "bootstrap_servers": "nohostport"}, ["bootstrap_servers:", "'nohostport'"]),
        ({**good, "configs": [1]}, ["configs:", "list"]),
        ({**good, "configs": {"fetch.min.bytes": [1]}}, ["configs['fetch.min.bytes']", "list"]),
        ({**good, "configs": {"group.id": "mine"}}, ["configs['group.id']", "'mine'"]),
        ({**good, "credentials": {"sasl.password": {"nested": secret}}}, ["credentials['sasl.password']"]),
        ({**good, "batch_size": "ten"}, ["batch_size:", "'ten'"]),
        ({**good, "batch_interval_ms": 0}, ["batch_interval_ms:", "got 0"]),
        ({**good, "sink": "ftp://somewhere"}, ["sink:", "'ftp'"]),
        ({**good, "transform": "no_such_module.fn"}, ["transform", "no_such_module"]),
    ]
    with http(host) as api:
        for body, expected in creates:
            response = api.post("/streams", content=body) if isinstance(body, bytes) else \
                api.post("/streams", json=body)
            assert response.status_code == 400, (body, response.text)
            error = response.json()["error"]
            assert all(part in error for part in expected), (expected, error)
            assert "Traceback" not in error and secret not in error and "\n" not in error
        assert api.get("/streams").json() == []

        api.post("/streams", json=good).raise_for_status()
        before = api.get("/streams/orders").json()
        offsets_before = api.get("/streams/orders/offsets").json()
        patches = [
            (b"", ["body: expected a JSON object"]),
            ({}, ["offset: required"]),
            ({"offset": 0, "force": True}, ["body: unknown field 'force'"]),
            ({"offset": "sometime"}, ["offset: cannot parse 'sometime'"]),
            ({"offset": [1]}, ["offset:", "[1]"]),
            ({"offset": {"other_topic": 0}}, ["offset:", "'other_topic'"]),
            ({"offset": {f"{topic}:7": 0}}, ["offset:", f"{topic}:7"]),
            ({"offset": 0, "timeout_ms": "soon"}, ["timeout_ms:", "'soon'"]),
            ({"offset": 0, "timeout_ms": 0}, ["timeout_ms:", "got 0"]),
            ({"offset": 0, "timeout_ms": 10 ** 30}, ["timeout_ms:", str(10 ** 30)]),
            ({"offset": 0, "dry_run": "yes"}, ["dry_run:", "'yes'"]),
        ]
        for body, expected in patches:
            response = api.patch("/streams/orders/offsets", content=body) if isinstance(body, bytes) else \
                api.patch("/streams/orders/offsets", json=body)
            assert response.status_code == 400, (body, response.text)
            error = response.json()["error"]
            assert all(part in error for part in expected), (expected, error)
        for limit in ("0", "-3", "ten"):
            response = api.get("/streams/orders/history", params={"limit": limit})
            assert response.status_code == 400 and response.json() == \
                {"error": f"limit: must be a positive integer, got '{limit}'"}

        # a body over 1 MiB is refused before the host holds it all, declared (Content-Length) or chunked
        huge = json.dumps({"offset": {f"{topic}:{p}": 0 for p in range(60_000)}}).encode()
        for response in (api.patch("/streams/orders/offsets", content=huge),
                         api.patch("/streams/orders/offsets", content=iter([huge[i:i + 65536]
                                                                            for i in range(0, len(huge), 65536)]))):
            assert response.status_code == 413 and response.json() == {
                "error": "body: larger than 1048576 bytes, the most the host reads"}, response.text

        assert api.get("/streams").json() == [before]
        assert api.get("/streams/orders/offsets").json() == offsets_before
        assert api.get("/streams/orders/history").json() == []
        # the host answers normally after all that: a valid change is accepted
        assert api.patch("/streams/orders/offsets", json={"offset": 0}).status_code == 200
    assert "Traceback" not in host.log()


def test_unknown_streams_paths_and_methods(host):
    with http(host) as api:
        for method, path in [("GET", "/streams/nope"), ("DELETE", "/streams/nope"), ("PUT", "/streams/nope/start"),
                             ("PUT", "/streams/nope/stop"), ("GET", "/streams/nope/offsets"),
                             ("GET", "/streams/nope/history")]:
            response = api.request(method, path)
            assert (response.status_code, response.json()) == (404, {"error": "name: no stream named 'nope'"}), \
                (method, path)
        response = api.patch("/streams/nope/offsets", json={"offset": 0})
        assert (response.status_code, response.json()) == (404, {"error": "name: no stream named 'nope'"})
        for path in ("/nope", "/streams/nope/offsets/extra", "/stream"):
            response = api.get(path)
            assert (response.status_code, response.json()) == (404, {"error": f"path: no resource at {path}"})
        for method, path, allowed in [("DELETE", "/streams", "GET, HEAD, POST"), ("POST", "/health", "GET, HEAD"),
                                      ("GET", "/streams/x/start", "PUT"), ("POST", "/metrics", "GET, HEAD"),
                                      ("PUT", "/streams/x", "DELETE, GET, HEAD, PATCH"),
                                      ("POST", "/streams/x/offsets", "GET, HEAD, PATCH")]:
            response = api.request(method, path)
            assert response.status_code == 405, (method, path)
            assert response.headers["allow"] == allowed
            assert response.json() == {"error": f"method: {method} is not allowed on {path} (allowed: {allowed})"}
    assert "Traceback" not in host.log()


def test_two_racing_creates_of_one_name_get_201_and_409_never_400(host, kafka, tmp_path):
    """A taken name is one StreamExists (409) whether the API's pre-check or the registry finds it: two
    creates sent at once both pass the pre-check, and the loser is told 409 by the registry too."""
    import threading

    topic = kafka.new_topic(partitions=1)
    for round_ in range(4):
        name = f"race{round_}"
        body = stream_body(kafka, topic, tmp_path / f"{name}.cypherl", name=name)
        barrier, answers = threading.Barrier(2), []

        def create(barrier=barrier, body=body, answers=answers) -> None:
            with http(host) as api:
                barrier.wait()
                response = api.post("/streams", json=body)
                answers.append((response.status_code, response.json()))
        threads = [threading.Thread(target=create) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        statuses = sorted(status for status, _ in answers)
        assert statuses == [201, 409], answers
        assert {"error": f"name: a stream named {name!r} already exists"} in [answer for _, answer in answers]
    assert "Traceback" not in host.log()


def test_the_client_raises_the_class_the_host_answered_with(host, kafka, tmp_path):
    """One table (stream_registry.errors): 400, 404, 409, 413 and 503 come back through HostClient as the
    classes that own them, not as the base StreamError."""
    from mgstreams.client import HostClient
    from stream_registry.errors import BodyTooLarge, ConfigError, KafkaOperationError, StreamNotFound, StreamStateError

    topic = kafka.new_topic(partitions=1)
    with HostClient(host.url) as client:
        body = stream_body(kafka, topic, tmp_path / "out.cypherl")
        client.create(**body)
        cases = [(ConfigError, lambda: client.create(**{**body, "name": "bad", "batch_size": 0}), "batch_size"),
                 (StreamNotFound, lambda: client.get("nope"), "name"),
                 (StreamStateError, lambda: client.create(**body), "already exists"),
                 (BodyTooLarge, lambda: client.create(**{**body, "name": "big", "configs": {"x": "y" * (1 << 20)}}),
                  "body: larger than"),
                 (KafkaOperationError, lambda: client.create(**{**body, "name": "far",
                                                                "bootstrap_servers": "127.0.0.1:1",
                                                                "configs": {"socket.timeout.ms": "1000"}}), "bootstrap_servers")]
        for cls, call, words in cases:
            with pytest.raises(cls, match=words) as raised:
                call()
            assert type(raised.value) is cls, (cls, raised.value)


ROUTES = [("GET", "/metrics", None), ("GET", "/streams", None), ("PATCH", "/streams/x", {"batch_size": 5}),
          ("POST", "/streams", {"name": "x"}), ("GET", "/streams/x", None), ("DELETE", "/streams/x", None),
          ("PUT", "/streams/x/start", None), ("PUT", "/streams/x/stop", None), ("GET", "/streams/x/offsets", None),
          ("PATCH", "/streams/x/offsets", {"offset": 0}), ("GET", "/streams/x/history", None),
          ("GET", "/no/such/path", None)]


def test_a_configured_token_is_required_on_every_route(tmp_path):
    token = f"tok-{uuid.uuid4().hex}"
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)   # a token file others can read is refused
    host = HostProcess(tmp_path / "state", env={"MGSTREAMS_TOKEN": ""},
                       extra_args=("--token-file", str(token_file))).start()
    try:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token},
                        {"Authorization": f"Basic {token}"}, {"Authorization": f"Bearer {token}x"}):
            with httpx.Client(base_url=host.url, headers=headers, timeout=30) as api:
                for method, path, body in ROUTES:
                    response = api.request(method, path, json=body)
                    assert response.status_code == 401, (headers, method, path, response.text)
                    assert response.headers["www-authenticate"].startswith("Bearer")
                    assert response.json() == {
                        "error": "authorization: a valid bearer token is required (Authorization: Bearer ...)"}
        for scheme in ("Bearer", "bearer"):
            with httpx.Client(base_url=host.url, headers={"Authorization": f"{scheme} {token}"}) as api:
                assert api.get("/streams").json() == []
                assert api.get("/metrics").status_code == 200
                assert api.get("/streams/x").status_code == 404     # past the token: an unknown stream
        # A liveness probe carries no token: /health answers it, and says nothing else.
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            health = httpx.get(f"{host.url}/health", headers=headers, timeout=30)
            assert (health.status_code, health.json()["status"]) == (200, "healthy"), health.text
            assert set(health.headers) <= {"content-length", "content-type", "date", "server"}, health.headers
        # The browser boundary still applies to it.
        foreign = httpx.get(f"{host.url}/health", headers={"Origin": "https://evil.example"}, timeout=30)
        assert foreign.status_code == 403, foreign.text
        rebound = httpx.get(f"{host.url}/health", headers={"Host": "attacker.example"}, timeout=30)
        assert rebound.status_code == 421, rebound.text
        assert host.terminate() == 0
    finally:
        host.stop()
    assert token not in host.log()


def test_a_non_loopback_address_needs_a_token(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "MGSTREAMS_TOKEN"}
    started = time.monotonic()
    refused = subprocess.run([sys.executable, "-m", "mgstreams", "serve", "--state-dir", str(tmp_path / "state"),
                              "--listen", "0.0.0.0:0"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=30)
    assert refused.returncode == 1 and refused.stdout == ""
    assert "0.0.0.0:0" in refused.stderr and "--token-file" in refused.stderr and "MGSTREAMS_TOKEN" in refused.stderr
    assert refused.stderr.startswith("mgstreams: error: listen:") and refused.stderr.count("\n") == 1
    assert time.monotonic() - started < 10
    assert not (tmp_path / "state").exists()      # refused before taking the state directory

    # a short token is refused beyond loopback, naming its length and never its value
    short = subprocess.run([sys.executable, "-m", "mgstreams", "serve", "--state-dir", str(tmp_path / "state"),
                            "--listen", "0.0.0.0:0"], capture_output=True, text=True, cwd=ROOT, timeout=30,
                           env={**env, "MGSTREAMS_TOKEN": "t0ken"})
    assert short.returncode == 1 and short.stderr.startswith("mgstreams: error: token: 5 characters")
    assert "t0ken" not in short.stderr

    # with a long enough token the same address serves, and asks for the token
    token = "t0ken-" + "x" * 32
    host = HostProcess(tmp_path / "state", token=token, extra_args=("--listen", "0.0.0.0:0")).start()
    try:
        port = host.url.rsplit(":", 1)[1]
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as api:
            assert api.get("/streams").status_code == 401
            assert api.get("/streams", headers={"Authorization": f"Bearer {token}"}).status_code == 200
            assert api.get("/health").json()["status"] == "healthy"   # a liveness probe's, without the token
    finally:
        host.stop()


def test_a_second_host_on_the_same_state_dir_exits_naming_the_first(host):
    """Its time to exit is bench/second_host_exit.py's figure (a ratio to `--help`), not a fixed bound here."""
    second = subprocess.run([sys.executable, "-m", "mgstreams", "serve", "--state-dir", str(host.state_dir),
                             "--listen", "127.0.0.1:0"], capture_output=True, text=True, cwd=ROOT, timeout=30)
    assert second.returncode == 1 and second.stdout == ""
    assert f"pid {host.proc.pid}" in second.stderr and "one host per state directory" in second.stderr
    assert second.stderr.startswith("mgstreams: error: state_dir:") and second.stderr.count("\n") == 1
    with http(host) as api:      # the first one is untouched
        assert api.get("/health").json()["status"] == "healthy"


def test_sigterm_commits_what_the_sink_holds_closes_the_consumer_and_exits_0(tmp_path, kafka):
    """KIP-848 groups: the embedded cluster acts on a leaving member at once (classic LeaveGroup it ignores);
    on Tansu (no KIP-848) the classic protocol, whose LeaveGroup it honours (LEAVES_AT_ONCE)."""
    topic = kafka.new_topic(partitions=3)
    kafka.produce(topic, 3000, partitions=3)
    out = tmp_path / "out.cypherl"
    configs = LEAVES_AT_ONCE
    body = stream_body(kafka, topic, out, batch_size=20, batch_interval_ms=5, configs=configs)
    host = HostProcess(tmp_path / "state").start()
    try:
        with http(host) as api:
            api.post("/streams", json=body).raise_for_status()
            api.put("/streams/orders/start").raise_for_status()
            wait_until(lambda: len(delivered_from_file(out)) >= 200, timeout=60, what="the stream consuming")
        started = time.monotonic()
        assert host.terminate(timeout=30) == 0
        assert time.monotonic() - started < 20
    finally:
        host.stop()

    # a partition nothing was written from has no commit (Tansu's fetches may serve one partition late)
    written = {p: OFFSET_INVALID for p in range(3)}
    written |= {p: max(offsets) + 1 for (_, p), offsets in by_partition(delivered_from_file(out)).items()}
    assert committed(kafka, body["consumer_group"], topic, 3, configs) == written
    assert "Traceback" not in host.log()

    # its consumer left the group: a new member of the group is given every partition at once
    kafka.produce(topic, 30, partitions=3)
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": body["consumer_group"],
                         **LEAVES_AT_ONCE, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        started = time.monotonic()
        first: dict[int, int] = {}
        while time.monotonic() - started < 20 and len(first) < 3:
            for message in consumer.consume(100, 0.2):
                if message.error() is None:
                    first.setdefault(message.partition(), message.offset())
        assert time.monotonic() - started < 8, "the group waited for the old member's session to expire"
        # and it resumes where the sink ends (a partition with no commit from its start): nothing lost or twice
        assert first == {p: max(offset, 0) for p, offset in written.items()}
    finally:
        consumer.close()


def test_sigkill_then_restart_resumes_running_streams_at_least_once(tmp_path, kafka):
    topic = kafka.new_topic(partitions=3)
    kafka.produce(topic, 300, partitions=3)
    out = tmp_path / "out.cypherl"
    body = stream_body(kafka, topic, out, batch_size=20, configs=FAST_REJOIN)
    first = HostProcess(tmp_path / "state").start()
    try:
        with http(first) as api:
            api.post("/streams", json=body).raise_for_status()
            api.put("/streams/orders/start").raise_for_status()
            wait_until(lambda: len(delivered_from_file(out)) >= 30, timeout=60, what="the stream consuming")
        first.kill()
        assert first.proc.returncode == -9
    finally:
        first.stop()

    kafka.produce(topic, 300, partitions=3)           # while no host runs
    second = HostProcess(tmp_path / "state").start()
    try:
        with http(second) as api:
            assert api.get("/streams/orders").json()["status"] in ("starting", "running")   # no call needed
            wait_until(lambda: api.get("/streams/orders").json()["status"] == "running", timeout=60,
                       what="the stream running again")
            kafka.produce(topic, 300, partitions=3)
            expected = {p: list(range(300)) for p in range(3)}
            wait_until(lambda: {p: sorted(set(o)) for (_, p), o in by_partition(delivered_from_file(out)).items()}
                       == expected, timeout=60, what="every produced offset in the sink")
            metrics = api.get("/metrics").text
            assert metric(metrics, "mgstreams_stream_up", "orders") == 1.0
        assert second.terminate() == 0
    finally:
        second.stop()
