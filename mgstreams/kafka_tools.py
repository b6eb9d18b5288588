"""Topics and sample data for a first stream: `mgstreams kafka topic create` and `mgstreams kafka produce`.

Against any cluster they are plain Kafka clients (CreateTopics through the
AdminClient, a Producer). The embedded cluster (`mgstreams kafka`, librdkafka's
mock brokers) has no CreateTopics: a topic can only be made through the mock's
own C API, inside the process that holds the cluster. So that process listens
on a Unix socket (`ControlServer`), found from the bootstrap address alone
under the user's runtime directory, and `create_topic` asks it there first.
The socket lives in a directory only its user can enter; it answers one JSON
request per connection.
"""
from __future__ import annotations

import json
import os
import re
import socket
import socketserver
import tempfile
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stream_registry.errors import ConfigError, StreamError

TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
MAX_PARTITIONS = 10_000
CREATE_TIMEOUT_S = 15.0


def runtime_dir() -> Path:
    """Where embedded clusters' control sockets live: $XDG_RUNTIME_DIR/mgstreams, else a per-user /tmp dir."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    return Path(base) / "mgstreams" if base else Path(tempfile.gettempdir()) / f"mgstreams-{os.getuid()}"


def control_path(address: str) -> Path:
    """The control socket of the embedded cluster one of whose brokers listens at `address` (host:port)."""
    return runtime_dir() / f"kafka-{address.strip().replace(':', '_')}.sock"


def check_topic(name: str, partitions: object) -> None:
    if not TOPIC_NAME.fullmatch(name) or name in (".", ".."):
        raise ConfigError(f"topic: {name!r} is not a topic name (letters, digits, '.', '_', '-'; at most 249)")
    if isinstance(partitions, bool) or not isinstance(partitions, int) or not 1 <= partitions <= MAX_PARTITIONS:
        raise ConfigError(f"partitions: must be from 1 to {MAX_PARTITIONS}, got {partitions!r}")


# -- the embedded cluster's side ------------------------------------------------------------------
class ControlServer:
    """Serves `create_topic` for an EmbeddedKafka on a Unix socket per broker address, until close()."""

    def __init__(self, cluster) -> None:
        self._cluster = cluster
        addresses = cluster.bootstrap_servers.split(",")
        directory = runtime_dir()
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if directory.stat().st_uid != os.getuid() or directory.stat().st_mode & 0o077:
            raise StreamError(f"embedded kafka: {directory} must be a directory only you can enter (mode 700)")
        self.paths = [control_path(a) for a in addresses]
        for path in self.paths:
            path.unlink(missing_ok=True)   # a cluster that died before it could clean up
        try:
            self._server = socketserver.ThreadingUnixStreamServer(str(self.paths[0]), self._handler())
        except OSError as exc:   # a runtime directory so deep that the socket's path is too long, for one
            raise StreamError(f"embedded kafka: cannot listen on {self.paths[0]}: {exc}") from None
        self._server.daemon_threads = True
        for path in self.paths[1:]:
            path.symlink_to(self.paths[0])
        self._thread = threading.Thread(target=self._server.serve_forever, name="embedded-kafka-control",
                                        daemon=True)
        self._thread.start()

    def _handler(self):
        cluster = self._cluster

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                try:
                    request = json.loads(self.rfile.readline(65536))
                    if not isinstance(request, dict) or request.get("op") != "create_topic":
                        raise ConfigError(f"op: unknown request {str(request)[:80]!r}")
                    name, partitions = request.get("name"), request.get("partitions")
                    check_topic(name if isinstance(name, str) else repr(name), partitions)
                    replication = request.get("replication", 1)
                    if isinstance(replication, bool) or not isinstance(replication, int) or replication < 1:
                        raise ConfigError(f"replication: must be an integer >= 1, got {replication!r}")
                    cluster.create_topic(name, partitions, replication)
                    answer = {"ok": True, "replication": min(replication, cluster.broker_count)}
                except (StreamError, ValueError) as exc:
                    answer = {"error": str(exc)}
                self.wfile.write(json.dumps(answer).encode() + b"\n")

        return Handler

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        for path in self.paths:
            path.unlink(missing_ok=True)


# -- the client's side ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class CreatedTopic:
    name: str
    partitions: int
    via: str   # "embedded" (the mock's own API) or "admin" (CreateTopics)


def create_topic(bootstrap_servers: str, name: str, partitions: int = 1, replication: int = 1,
                 timeout: float = CREATE_TIMEOUT_S) -> CreatedTopic:
    """Create topic `name`: on an embedded cluster through its control socket, else with CreateTopics."""
    check_topic(name, partitions)
    for address in bootstrap_servers.split(","):
        path = control_path(address)
        if path.exists():
            _ask_embedded(path, {"op": "create_topic", "name": name, "partitions": partitions,
                                 "replication": replication}, timeout)
            return CreatedTopic(name, partitions, "embedded")
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 3})
    brokers = len(admin.list_topics(timeout=timeout).brokers) if replication > 1 else 1
    future = admin.create_topics([NewTopic(name, partitions, min(replication, max(brokers, 1)))],
                                 operation_timeout=timeout, request_timeout=timeout)[name]
    try:
        future.result(timeout + 5)
    except KafkaException as exc:
        error = exc.args[0]
        if error.code() == -185:   # _TIMED_OUT waiting for a controller: librdkafka's mock has none
            raise StreamError(f"topic: {bootstrap_servers} did not create {name!r} within {timeout:g} s (no "
                              f"controller answered CreateTopics; an embedded cluster started with "
                              f"`mgstreams kafka` is reached through its control socket in {runtime_dir()}, "
                              f"which is missing)") from None
        raise StreamError(f"topic: cannot create {name!r} on {bootstrap_servers}: {error.str()}") from None
    return CreatedTopic(name, partitions, "admin")


def _ask_embedded(path: Path, request: dict, timeout: float) -> dict:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            sock.sendall(json.dumps(request).encode() + b"\n")
            answer = json.loads(sock.makefile("rb").readline() or b"{}")
    except (OSError, ValueError) as exc:
        raise StreamError(f"embedded kafka: no answer on {path} ({exc}); is `mgstreams kafka` still running?") \
            from None
    if "error" in answer or not answer.get("ok"):
        raise StreamError(str(answer.get("error") or f"embedded kafka: unexpected answer {answer!r}"))
    return answer


# -- producing -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Message:
    value: bytes | None          # None: a tombstone (Kafka's delete marker for a key)
    key: bytes | None = None


def json_lines(lines: Iterable[str], key_field: str | None = None, key_separator: str | None = None
               ) -> Iterator[Message]:
    """JSON documents, one a line (blank lines skipped); a line that is not JSON stops the run, naming it.

    A key comes from `key_field`, a dotted path into the document (`after.id`, `payload.after.id`), or from the
    line itself: with `key_separator` each line is `KEY<separator>VALUE`, both JSON, as Kafka's console producer
    reads `parse.key`. A value `null` is a tombstone (no value: what Debezium sends after a delete). A key that is
    a JSON string is its text; any other JSON key is sent as compact JSON (Debezium's `{"id": 1}`)."""
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text:
            continue
        key_text = None
        if key_separator is not None:
            key_text, found, text = text.partition(key_separator)
            if not found:
                raise ConfigError(f"line {number}: --key-separator: no {key_separator!r} between a key and a value "
                                  f"in {line.strip()[:60]!r}")
        document = _json(number, text.strip())
        key = None
        if key_text is not None:
            key = _key_bytes(_json(number, key_text.strip()))
        elif key_field is not None:
            key = _key_bytes(_at_path(number, document, key_field, text))
        value = None if document is None else json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
        yield Message(value, key)


def _json(number: int, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"line {number}: not JSON ({exc}): {text[:60]!r}") from None


def _at_path(number: int, document: Any, path: str, text: str) -> Any:
    value = document
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            raise ConfigError(f"line {number}: --key-field: no field {path!r} in {text[:60]!r}")
        value = value[part]
    return value


def _key_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.encode()


def produce(bootstrap_servers: str, topic: str, messages: Iterable[Message], *,
            timeout: float = 30.0) -> dict[int, int]:
    """Produce `messages` to `topic`; returns how many each partition got. Nothing undelivered goes unsaid."""
    from confluent_kafka import Producer

    delivered: dict[int, int] = {}
    errors: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(err.str())
        else:
            delivered[msg.partition()] = delivered.get(msg.partition(), 0) + 1

    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 20, "log_level": 3})
    for message in messages:
        while True:
            try:
                producer.produce(topic, value=message.value, key=message.key, on_delivery=on_delivery)
                break
            except BufferError:   # the local queue is full: let deliveries drain it
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(timeout)
    if remaining or errors:
        raise StreamError(f"produce: {remaining + len(errors)} message(s) to {topic!r} not delivered"
                          + (f": {errors[0]}" if errors else f" within {timeout:g} s"))
    return dict(sorted(delivered.items()))
