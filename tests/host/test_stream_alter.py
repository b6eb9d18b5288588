"""Altering a stream (issue 24) through a real host: `PATCH /streams/{name}` and `mgstreams alter` as a child
process (`streams.alter` is in test_query_module.py).

What an operator relies on: what is given changes and nothing else; a running stream restarts itself to
apply it and resumes from its committed offsets; a refused alter (the same checks as create, allowlists
included) is a 400 naming the field and changes nothing, not even the running process; the state store
keeps the new config across a host restart; pending offset changes and the history survive.
"""
from __future__ import annotations

import json
import re
import uuid
from functools import partial

import cli_helpers
import httpx
import pytest
from host_helpers import HostProcess
from hypothesis import given
from hypothesis import strategies as st
from stream_helpers import FAST_REJOIN, by_partition, delivered_from_file, wait_until

pytestmark = pytest.mark.usefixtures("quick_rebalance")
TRANSFORM = "stream_helpers.offsets_transform"
# the console script, with time to spare on a loaded machine
mgstreams = partial(cli_helpers.mgstreams, script=True, timeout=180)


def new_stream(api: httpx.Client, kafka, name: str, topic: str, out, **overrides) -> dict:
    created = api.post("/streams", json={
        "name": name, "topics": [topic], "bootstrap_servers": kafka.bootstrap_servers, "transform": TRANSFORM,
        "sink": f"cypherl://{out}", "consumer_group": f"alter_{uuid.uuid4().hex[:8]}", "batch_interval_ms": 20,
        "configs": FAST_REJOIN, **overrides})
    assert created.status_code == 201, created.text
    return created.json()


# Each refusal names its field; none changes anything.
REFUSED = [
    ({"batch_size": 0}, "batch_size: must be a positive integer, got 0"),
    ({"batch_interval_ms": "fast"}, "batch_interval_ms: must be a positive integer, got 'fast'"),
    ({"topics": ["other"]}, "topics: cannot be altered"),
    ({"consumer_group": "other_group"}, "consumer_group: cannot be altered"),
    ({"nonsense": 1}, "body: unknown field 'nonsense'"),
    ({}, "changes: nothing to change"),
    ({"configs": {"plugin.library.paths": "/tmp/probe.so"}}, "configs['plugin.library.paths']: loads code"),
    ({"configs": {"group.id": "someone_else"}}, "configs['group.id']: set by mgstreams itself"),
    ({"configs": {"ssl.ca.location": "/etc/passwd"}}, "configs['ssl.ca.location']: not under a directory"),
    ({"configs": {"sasl.oauthbearer.token.endpoint.url": "https://evil.example/token"}},
     "configs['sasl.oauthbearer.token.endpoint.url']: host 'evil.example' is not one the operator allows"),
    ({"configs": "fetch.wait.max.ms=10"}, "configs: expected a map"),
    ({"sink": "bolt://evil.example:7687"}, "sink: host 'evil.example' is not one the operator allows"),
    ({"sink": "cypherl:///etc/mgstreams-alter.cypherl"}, "sink: "),
    ({"sink": "gopher://x"}, "sink: "),
    ({"transform": "no_such_module_xyz.fn"}, "transform 'no_such_module_xyz.fn': refused"),
    ({"transform": "merge"}, "transform: expected 'module.function'"),
]


def test_alter_a_running_stream_restarts_it_with_the_new_config(host, kafka, tmp_path):
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 6, partitions=2)
    first, second = tmp_path / "first.cypherl", tmp_path / "second.cypherl"
    api = httpx.Client(base_url=host.wait_ready(), timeout=180)
    new_stream(api, kafka, "orders", topic, first)
    assert api.put("/streams/orders/start").status_code == 200
    wait_until(lambda: len(delivered_from_file(first)) == 6, what="the first six messages")
    wait_until(lambda: api.get("/streams/orders").json()["status"] == "running", what="running")
    moved = api.patch("/streams/orders/offsets", json={"offset": {f"{topic}:0": 1}, "timeout_ms": 30_000})
    assert moved.status_code == 200 and {c["status"] for c in moved.json()} == {"applied"}, moved.text
    wait_until(lambda: len(delivered_from_file(first)) == 8, what="partition 0 redelivered from offset 1")
    history = api.get("/streams/orders/history").json()
    before = api.get("/streams/orders").json()

    for body, message in REFUSED:
        refused = api.patch("/streams/orders", json=body)
        assert refused.status_code == 400, (body, refused.text)
        assert refused.json()["error"].startswith(message), (body, refused.json())
        now = api.get("/streams/orders").json()
        assert (now["status"], now["pid"], now["sink"], now["transform"], now["batch_size"], now["configs"]) == \
            (before["status"], before["pid"], before["sink"], before["transform"], before["batch_size"],
             before["configs"]), f"{body} changed the stream"
    assert api.patch("/streams/nosuch", json={"batch_size": 5}).status_code == 404

    altered = api.patch("/streams/orders", json={"sink": f"cypherl://{second}", "batch_size": 7,
                                                 "batch_interval_ms": 30, "configs": {"fetch.wait.max.ms": 10}})
    assert altered.status_code == 200, altered.text
    info = altered.json()
    assert (info["sink"], info["batch_size"], info["batch_interval_ms"]) == (f"cypherl://{second}", 7, 30)
    assert info["configs"] == {**FAST_REJOIN, "fetch.wait.max.ms": 10} and info["status"] in ("starting", "running")
    assert info["pid"] and info["pid"] != before["pid"], "a running stream restarts in a new process to apply it"
    assert info["consumer_group"] == before["consumer_group"] and info["topics"] == before["topics"]

    kafka.produce(topic, 4, partitions=2)
    wait_until(lambda: len(delivered_from_file(second)) == 4, what="new messages in the new sink")
    assert by_partition(delivered_from_file(second)) == {(topic, 0): [3, 4], (topic, 1): [3, 4]}, \
        "it resumed from its committed offsets, not from the beginning"
    assert len(delivered_from_file(first)) == 8, "the old sink gets nothing more"
    assert api.get("/streams/orders/history").json() == history, "the history survives"

    # A stopped stream's pending change survives an alter, and is applied when it starts.
    assert api.put("/streams/orders/stop").json()["status"] == "stopped"
    pending = api.patch("/streams/orders/offsets", json={"offset": {f"{topic}:1": 0}}).json()
    assert [c["status"] for c in pending] == ["pending"], pending
    assert api.patch("/streams/orders", json={"configs": {"fetch.wait.max.ms": None}}).json()["status"] == \
        "stopped", "a stopped stream stays stopped"
    assert [(p["topic"], p["partition"], p["offset"]) for p in api.get("/streams/orders/pending").json()] == \
        [(topic, 1, 0)]
    assert api.get("/streams/orders").json()["configs"] == FAST_REJOIN, "a null value removes the key"

    # The state store keeps it: a new host on the same state directory reads the altered stream back.
    assert host.stop() == 0
    with HostProcess(host.state_dir) as again:
        api2 = httpx.Client(base_url=again.url, timeout=60)
        info = api2.get("/streams/orders").json()
        assert (info["sink"], info["batch_size"], info["batch_interval_ms"], info["configs"]) == \
            (f"cypherl://{second}", 7, 30, FAST_REJOIN)
        assert [p["offset"] for p in api2.get("/streams/orders/pending").json()] == [0]
        assert api2.put("/streams/orders/start").status_code == 200
        wait_until(lambda: (topic, 1, 0) in delivered_from_file(second)[4:], what="the pending change applied")
        assert [h["change_id"] for h in api2.get("/streams/orders/history").json()][-len(history):] == \
            [h["change_id"] for h in history]


def test_mgstreams_alter(host, kafka, tmp_path):
    topic = kafka.new_topic(partitions=1)
    api = httpx.Client(base_url=host.wait_ready(), timeout=60)
    new_stream(api, kafka, "cli_alter", topic, tmp_path / "out.cypherl")
    url = ("--url", host.url)

    done = mgstreams(*url, "alter", "cli_alter", "--batch-size", "50", "--batch-interval-ms", "40",
                     "--config", "fetch.wait.max.ms=10", "--unset-config", "heartbeat.interval.ms",
                     "--sink", f"cypherl://{tmp_path / 'other.cypherl'}")
    assert (done.returncode, done.stdout, done.stderr) == (0, "cli_alter altered (created)\n", "")
    info = api.get("/streams/cli_alter").json()
    assert (info["batch_size"], info["batch_interval_ms"], info["sink"]) == \
        (50, 40, f"cypherl://{tmp_path / 'other.cypherl'}")
    assert info["configs"] == {**{k: v for k, v in FAST_REJOIN.items() if k != "heartbeat.interval.ms"},
                               "fetch.wait.max.ms": "10"}
    as_json = mgstreams("alter", "cli_alter", "--transform", "stream_registry.builtin_transformations.merge_messages",
                        "--json", *url)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["transform"] == "stream_registry.builtin_transformations.merge_messages"

    before = api.get("/streams/cli_alter").json()
    for args, message in [(("--config", "plugin.library.paths=/tmp/probe.so"), "configs['plugin.library.paths']: "),
                          (("--transform", "no_such_module_xyz.fn"), "transform 'no_such_module_xyz.fn': "),
                          (("--sink", "bolt://evil.example:7687"), "sink: host 'evil.example'")]:
        refused = mgstreams(*url, "alter", "cli_alter", *args)
        assert refused.returncode == 1 and refused.stdout == "", refused
        assert refused.stderr.startswith(f"mgstreams: error: {message}") and refused.stderr.count("\n") == 1, \
            refused.stderr
    assert api.get("/streams/cli_alter").json() == before
    nothing = mgstreams(*url, "alter", "cli_alter")
    assert nothing.returncode == 2 and "nothing to change" in nothing.stderr
    zero = mgstreams(*url, "alter", "cli_alter", "--batch-size", "0")
    assert zero.returncode == 2 and "--batch-size" in zero.stderr
    missing = mgstreams(*url, "alter", "nosuch", "--batch-size", "5")
    assert missing.returncode == 1 and "no stream named 'nosuch'" in missing.stderr


def test_concurrent_alters_leave_one_config_in_memory_and_in_the_state_store(host, kafka, tmp_path):
    """Alters validate outside the stream's lock: one that raced another is a 409, never a lost or mixed update."""
    import threading

    topic = kafka.new_topic(partitions=1)
    api = httpx.Client(base_url=host.wait_ready(), timeout=120)
    new_stream(api, kafka, "raced", topic, tmp_path / "out.cypherl")
    answers: dict[int, int] = {}

    def alter(size: int) -> None:
        with httpx.Client(base_url=host.url, timeout=120) as own:
            response = own.patch("/streams/raced", json={"batch_size": size, "batch_interval_ms": size})
            answers[size] = response.status_code
    threads = [threading.Thread(target=alter, args=(size,)) for size in range(11, 19)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert set(answers.values()) <= {200, 409} and 200 in answers.values(), answers
    info = api.get("/streams/raced").json()
    assert info["batch_size"] == info["batch_interval_ms"] and answers[info["batch_size"]] == 200, (info, answers)
    assert host.stop() == 0
    with HostProcess(host.state_dir) as again:
        stored = httpx.get(f"{again.url}/streams/raced", timeout=60).json()
    assert (stored["batch_size"], stored["batch_interval_ms"]) == (info["batch_size"], info["batch_interval_ms"])


KEYS = ("fetch.wait.max.ms", "client.id", "sasl.password", "session.timeout.ms")


@given(start=st.dictionaries(st.sampled_from(KEYS), st.text("abc123", min_size=1, max_size=4)),
       patch=st.dictionaries(st.sampled_from(KEYS), st.one_of(st.none(), st.text("xyz9", min_size=1, max_size=4))))
def test_altered_merges_configs_and_leaves_the_original_alone(start, patch):
    from stream_registry.config import StreamConfig

    config = StreamConfig("s", ["t"], "localhost:9092", "m.f", "null://", configs=start)
    altered = config.altered({"configs": patch})
    expected = {k: v for k, v in {**start, **patch}.items() if v is not None}
    assert dict(altered.configs) == expected and dict(config.configs) == start
    assert (altered.name, altered.topics, altered.group_id) == (config.name, config.topics, config.group_id)
    assert "abc" not in repr(altered.shown_configs().get("sasl.password", ""))


ALTER_FIELD_NAMES = ("batch_size", "batch_interval_ms", "transform", "sink", "configs")
CONFIG_KEYS = ("fetch.wait.max.ms", "client.id", "plugin.library.paths", "group.id", "debug", "ssl.ca.location",
               "sasl.password", "x")
values = st.one_of(st.none(), st.booleans(), st.integers(-3, 300), st.text(max_size=12),
                   st.sampled_from(["stream_registry.builtin_transformations.merge_messages", "null://",
                                    "os.system", "bolt://evil.example:7687", "cypherl:///etc/x.cypherl"]))
bodies = st.dictionaries(st.sampled_from((*ALTER_FIELD_NAMES, "topics", "name", "consumer_group", "junk")),
                         st.one_of(values, st.dictionaries(st.sampled_from(CONFIG_KEYS),
                                                           st.one_of(values, st.lists(st.integers(), max_size=2)),
                                                           max_size=3)),
                         max_size=3)
valid_bodies = st.fixed_dictionaries({}, optional={
    "batch_size": st.integers(1, 5000), "batch_interval_ms": st.integers(1, 5000),
    "transform": st.just("stream_registry.builtin_transformations.merge_messages"), "sink": st.just("null://"),
    "configs": st.fixed_dictionaries({}, optional={"fetch.wait.max.ms": st.one_of(st.none(), st.integers(1, 100)),
                                                   "client.id": st.one_of(st.none(), st.from_regex(r"\Ac[a-z]{1,6}\Z")),
                                                   "sasl.password": st.one_of(st.none(), st.just("pw-fuzz"))})})


def test_fuzzed_alters_are_applied_as_a_merge_or_refused_naming_a_field_and_changing_nothing(host, kafka, tmp_path):
    """Against a model: an accepted alter leaves exactly the merge of what was sent; a refused one (400, its error
    naming a field) leaves the stream as it was; never a 500."""
    from hypothesis import HealthCheck, settings

    topic = kafka.new_topic(partitions=1)
    api = httpx.Client(base_url=host.wait_ready(), timeout=60)
    new_stream(api, kafka, "fuzzed", topic, tmp_path / "out.cypherl", configs={"fetch.wait.max.ms": 20})
    shown = ("batch_size", "batch_interval_ms", "transform", "sink", "configs")
    outcomes = {"applied": 0, "refused": 0}

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(body=st.one_of(bodies, valid_bodies))
    def alter(body):
        before = {k: api.get("/streams/fuzzed").json()[k] for k in shown}
        response = api.patch("/streams/fuzzed", json=body)
        after = {k: api.get("/streams/fuzzed").json()[k] for k in shown}
        assert response.status_code in (200, 400), (body, response.status_code, response.text)
        if response.status_code == 400:
            error = response.json()["error"]
            assert re.match(r"(body|changes|batch_size|batch_interval_ms|transform|sink|configs|topics|name|"
                            r"consumer_group)\b", error), (body, error)
            configs = body.get("configs")
            secret = configs.get("sasl.password") if isinstance(configs, dict) else None
            assert not (isinstance(secret, str) and len(secret) >= 4 and secret in error), (body, error)
            assert after == before, (body, error)
            outcomes["refused"] += 1
            return
        expected = {**before, **{k: v for k, v in body.items() if k != "configs"}}
        if "configs" in body:
            expected["configs"] = {k: v for k, v in {**before["configs"], **body["configs"]}.items() if v is not None}
            expected["configs"] = {k: ("****" if k == "sasl.password" else v) for k, v in expected["configs"].items()}
        assert after == expected, (body, after)
        outcomes["applied"] += 1
    alter()
    assert outcomes["applied"] and outcomes["refused"], outcomes
    assert "pw-fuzz" not in host.log() and "stream fuzzed: altered (" in host.log()


def test_a_stream_follows_its_cluster_to_another_one_from_where_the_alter_says(host, kafka, tmp_path):
    """Issue 46: bootstrap_servers could not be altered ("drop and create", the history lost). Now a change of cluster
    is an offset change like a sink change: `from` says where the new cluster's partitions start (resolved there),
    the history records it, and the stream runs on the new cluster."""
    from mgstreams.embedded_kafka import EmbeddedKafka

    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 5, partitions=1)
    out = tmp_path / "follow.cypherl"
    api = httpx.Client(base_url=host.url, timeout=120)
    new_stream(api, kafka, "follow", topic, out)
    assert api.put("/streams/follow/start").status_code == 200
    wait_until(lambda: len(delivered_from_file(out)) == 5, 60, what="5 from the first cluster")
    with EmbeddedKafka(brokers=1, initial_rebalance_delay_ms=100) as second:
        second.create_topic(topic, 1)
        producer_cluster = type(kafka)(second.bootstrap_servers, second)
        producer_cluster.produce(topic, 3, partitions=1)
        without = api.patch("/streams/follow", json={"bootstrap_servers": second.bootstrap_servers})
        assert without.status_code == 400 and without.json()["error"].startswith("from: a change of cluster"), \
            without.text
        assert api.get("/streams/follow").json()["bootstrap_servers"] == kafka.bootstrap_servers   # unchanged
        moved = api.patch("/streams/follow", json={"bootstrap_servers": second.bootstrap_servers, "from": "earliest"})
        assert moved.status_code == 200, moved.text
        assert moved.json()["bootstrap_servers"] == second.bootstrap_servers
        # the second cluster's three records, from its offset 0, after the first cluster's five
        wait_until(lambda: len(delivered_from_file(out)) == 8, 60, what="3 more from the second cluster")
        assert [o for _, _, o in delivered_from_file(out)] == [0, 1, 2, 3, 4, 0, 1, 2]
        history = api.get("/streams/follow/history").json()
        assert [(h["partition"], h["offset"], h["status"]) for h in history] == [(0, 0, "applied")], history
        assert history[0]["message"].startswith(f"cluster change {kafka.bootstrap_servers} -> "
                                                f"{second.bootstrap_servers}"), history
        assert api.put("/streams/follow/stop").status_code == 200
    api.delete("/streams/follow")
