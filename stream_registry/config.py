"""StreamConfig: what a user declares about a stream, and its validation.

Validation is pure (no network); the registry adds the cluster's checks (brokers, topics) before storing.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import Any

from .addresses import BootstrapServers, clean_text, escaped
from .allowlists import URL_PROPERTIES, check_properties, checked_bootstrap, checked_url
from .errors import ConfigError
from .formats import REGISTRY_CREDENTIAL_PREFIX, check_formats
from .graph.sinks.schemes import parse_sink_uri
from .redaction import mask_all, mask_secrets, redact, redact_error, secret_values
from .stream_engine import HOST, check_engine
from .stream_tasks import check_tasks

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")    # \Z, not $: "a\n" is no name
_TOPIC = re.compile(r"[A-Za-z0-9._-]+\Z")
_TRANSFORM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+\Z")   # module.function, ASCII
MAX_NAME_LENGTH = 128
MAX_TOPIC_LENGTH = 249
GROUP_PREFIX = "mgstreams_"   # a stream's default group is mgstreams_<name>: the host's own namespace

ASSIGNMENT_STRATEGIES = frozenset({"range", "roundrobin", "cooperative-sticky"})
GROUP_PROTOCOLS = frozenset({"classic", "consumer"})
# librdkafka settings a stream starts from; a stream's `configs` override them.
CONSUMER_DEFAULTS: dict[str, str | int] = {
    "auto.offset.reset": "earliest",
    # A caught-up partition's fetch is held by the broker up to this long (default 500), and a seek waits for
    # the fetch in flight: kept short so offset changes act within milliseconds (kafka/fetch_wait.py says why 3).
    "fetch.wait.max.ms": 3,
    # Once a partition's local queue holds more than queued.min.messages (one compressed fetch
    # often does), its next fetch waits this long (default 1000): a stream catching up then
    # idles most of the time. 50 ms made catching up about 3x faster (bench/multi_stream.py).
    "fetch.queue.backoff.ms": 50,
}
# Credentials with this prefix are for the graph sink, not for librdkafka.
SINK_CREDENTIAL_PREFIX = "bolt."


class RestartPolicy(StrEnum):
    """What the host does when a stream's process dies (a signal, an exit, the OOM killer)."""
    ON_FAILURE = "on-failure"   # restart with capped exponential backoff, as Kafka Connect restarts tasks
    NEVER = "never"             # stay in error, naming the cause, until someone starts it


class Delivery(StrEnum):
    """Where a batch's offsets are kept, and so what a crash can repeat."""
    AT_LEAST_ONCE = "at_least_once"   # committed to Kafka after the graph write: a crash repeats one batch
    EXACTLY_ONCE = "exactly_once"     # written with the batch, in the same transaction or write: nothing repeats


class DataLossPolicy(StrEnum):
    """What a stream does when records left the log before it read them (its offset fell below the log start)."""
    CONTINUE = "continue"   # go on from the log start, count the records lost (history, metrics, verdict ERR)
    STOP = "stop"           # go to error naming the range that left the log; the committed offset stays


class ErrorsTolerance(StrEnum):
    """What a message that cannot be transformed or written does to its stream (Kafka Connect's errors.tolerance)."""
    NONE = "none"   # the batch is retried, then the stream goes to error
    ALL = "all"     # the message is dead-lettered (or skipped and recorded); the others go on


MAX_COMMIT_INTERVAL_MS = 60_000   # commit.interval.ms: a minute of re-read batches after a crash at the most
# Kafka Connect's names for these settings: Cypher's `options` map and the API's create body use them.
OPTION_FIELDS = {
    "delivery": "delivery",
    "errors.tolerance": "errors_tolerance",
    "errors.deadletterqueue.topic.name": "dead_letter_topic",
    "errors.deadletterqueue.context.headers.enable": "dead_letter_context_headers",
    "restart": "restart",
    "bolt_unwind": "bolt_unwind",
    "tasks": "tasks",
    # record formats (stream_registry.formats) and the transformation's own options
    "key.format": "key_format",
    "value.format": "value_format",
    "schema.registry.url": "schema_registry_url",
    "transform.options": "transform_options",
    "on_data_loss": "on_data_loss",
    "check_sink": "check_sink", "commit.interval.ms": "commit_interval_ms",   # the latter: Kafka Streams' name
    "engine": "engine", "spark.remote": "spark_remote", "spark.master": "spark_master",   # stream_engine.py
}
_ENUM_FIELDS = {"restart": RestartPolicy, "delivery": Delivery, "errors_tolerance": ErrorsTolerance,
                "on_data_loss": DataLossPolicy}
# What `alter` may change on an existing stream (its identity, topics and group stay: drop and create for those).
ALTERABLE_FIELDS = ("batch_size", "batch_interval_ms", "transform", "sink", "configs", "restart", "errors_tolerance",
                    "dead_letter_topic", "dead_letter_context_headers", "bolt_unwind", "tasks", "commit_interval_ms",
                    "key_format", "value_format", "schema_registry_url", "transform_options", "bootstrap_servers",
                    "credentials")   # a new cluster is an offset change (registry.sink_change)
ALTER_OPTIONS = ("from",)   # an alter's options beyond the fields: where a new sink starts (registry.sink_change)
# What it cannot change, and why: the message says so plainly.
_NOT_ALTERABLE = {
    "name": "it names the stream",
    "topics": "they are what the stream's group has committed offsets for",
    "consumer_group": "it holds the stream's committed offsets",
    "delivery": "an exactly-once stream resumes from the offsets its sink stores, an at-least-once one from "
                "its Kafka commits, so a switch would move every partition",
    **dict.fromkeys(("engine", "spark_remote", "spark_master"), "a Spark stream's query keeps its own checkpoint"),
}

@dataclass(frozen=True)
class StreamConfig:
    name: str
    topics: Sequence[str]
    bootstrap_servers: str
    transform: str
    sink: str
    consumer_group: str | None = None
    batch_size: int = 1000
    batch_interval_ms: int = 100
    configs: Mapping[str, Any] = field(default_factory=dict)
    credentials: Mapping[str, Any] = field(default_factory=dict)
    restart: RestartPolicy = RestartPolicy.ON_FAILURE
    delivery: Delivery = Delivery.AT_LEAST_ONCE
    errors_tolerance: ErrorsTolerance = ErrorsTolerance.NONE
    dead_letter_topic: str | None = None
    dead_letter_context_headers: bool = True
    bolt_unwind: bool = True     # a Bolt sink folds runs of one query text into UNWIND statements (graph/unwind.py)
    tasks: int = 1               # member processes of its group (Kafka Connect's tasks.max): stream_tasks.py
    key_format: str = "bytes"    # formats.Format: how keys and values are decoded before the transformation
    value_format: str = "bytes"
    schema_registry_url: str | None = None
    transform_options: Mapping[str, Any] = field(default_factory=dict)   # fn(messages, options=...)
    on_data_loss: DataLossPolicy = DataLossPolicy.CONTINUE
    check_sink: bool = True      # create (and an alter of the sink) connects and logs in to a Bolt sink first
    commit_interval_ms: int = 500  # a backlog's batches committed every N ms; 0: each batch after it (group_commits)
    engine: str = HOST           # what runs it, host or spark, and where a Spark query runs: stream_engine.py
    spark_remote: str | None = None
    spark_master: str | None = None

    def __post_init__(self) -> None:
        """Normalise the containers; a value of the wrong kind is refused here, naming the field."""
        try:
            self._normalise()
        except ConfigError as exc:
            raise ConfigError(redact_error(str(exc), _secrets_of(self.configs, self.credentials))) from None

    def _normalise(self) -> None:
        if isinstance(self.topics, str):
            object.__setattr__(self, "topics", (self.topics,))
        elif isinstance(self.topics, (list, tuple)):
            object.__setattr__(self, "topics", tuple(self.topics))
        else:
            raise ConfigError(f"topics: expected a list of topic names, got {type(self.topics).__name__} "
                              f"{_shown_value(self.topics)}")
        for name in ("configs", "credentials"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Mapping):
                raise ConfigError(f"{name}: expected a map, got {type(value).__name__}"
                                  + ("" if name == "credentials" else f" {_shown_value(value)}"))
            object.__setattr__(self, name, dict(value or {}))
        for name, kind in _ENUM_FIELDS.items():   # text from JSON or Cypher becomes the enum; validate() names the rest
            value = getattr(self, name)
            if value is None:
                object.__setattr__(self, name, next(iter(kind)))
            elif isinstance(value, str) and value in {member.value for member in kind}:
                object.__setattr__(self, name, kind(value))
        if self.dead_letter_topic == "":
            object.__setattr__(self, "dead_letter_topic", None)
        self._normalise_formats()
        # The allowlist, at every construction: a create (before any Kafka client exists) and a stored
        # stream read back from the state store alike.
        check_properties("configs", self.configs)
        check_properties("credentials", self.credentials, sink_keys=True)

    def _normalise_formats(self) -> None:
        """Formats and the registry (its URL under the host allowlist), at every construction like the allowlists;
        `transform.options` may come as JSON text (a CLI --config)."""
        for name in ("key_format", "value_format"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, "bytes")
        if self.schema_registry_url == "":
            object.__setattr__(self, "schema_registry_url", None)
        options = self.transform_options
        if isinstance(options, str):
            try:
                options = json.loads(options) if options.strip() else {}
            except ValueError as exc:
                raise ConfigError(f"transform.options: not a JSON map ({exc})") from None
        if options is not None and not isinstance(options, Mapping):
            raise ConfigError(f"transform.options: expected a map, got {type(options).__name__}")
        object.__setattr__(self, "transform_options", dict(options or {}))
        registry_url = check_formats(self.key_format, self.value_format, self.schema_registry_url, self.credentials)
        object.__setattr__(self, "schema_registry_url", registry_url)   # the URL as parsed and checked is the one used

    def __repr__(self) -> str:
        secrets = self.secret_values()   # values only: a secret `consumer` leaves the name consumer_group whole
        shown = ", ".join(f"{f.name}={redact(repr(self._shown(f.name)), secrets)}" for f in fields(self))
        return f"StreamConfig({shown})"

    __str__ = __repr__

    def _shown(self, name: str):
        value = getattr(self, name)
        if name == "credentials":
            return mask_all(value)
        if name == "configs":
            return self.shown_configs()
        return value

    def secret_values(self) -> list[str]:
        """Every secret of this stream (credentials, secret-looking configs), for `redact`."""
        return _secrets_of(self.configs, self.credentials)

    def shown_configs(self) -> dict[str, Any]:
        """The configs as they may be shown: secret keys masked, any value equal to a secret masked."""
        return mask_secrets(self.configs, self.secret_values())

    @property
    def group_id(self) -> str:
        return self.consumer_group or f"{GROUP_PREFIX}{self.name}"

    def with_group(self) -> StreamConfig:
        """The same config with its consumer group made explicit (stored form)."""
        return replace(self, consumer_group=self.group_id)

    def altered(self, changes: Mapping[str, Any]) -> StreamConfig:
        """This stream with `changes` (a subset of ALTERABLE_FIELDS) applied and validated as a create is:
        `configs` is merged into the present ones (a null value removes a key). ConfigError naming the first
        bad field; nothing is changed then (the config is a value)."""
        fields = alter_fields(changes)
        for name in ("configs", "credentials"):   # merged: a password rotated alone keeps the user name
            if name not in fields:
                continue
            patch = fields[name]
            if not isinstance(patch, Mapping):
                shown = _shown_value(patch) if name == "configs" else "(not shown)"
                raise ConfigError(f"{name}: expected a map, got {type(patch).__name__} {shown}")
            merged = dict(getattr(self, name))
            for key, value in patch.items():
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
            fields[name] = merged
        new = replace(self, **fields)   # __post_init__: the property allowlist, before anything is built
        new.validate()
        return new

    def kafka_credentials(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.credentials.items()
                if not k.startswith((SINK_CREDENTIAL_PREFIX, REGISTRY_CREDENTIAL_PREFIX))}

    def sink_credentials(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.credentials.items() if k.startswith(SINK_CREDENTIAL_PREFIX)}

    @property
    def bootstrap(self) -> BootstrapServers:
        """The broker list parsed (ConfigError naming `bootstrap_servers` if it does not parse)."""
        return BootstrapServers.parse("bootstrap_servers", self.bootstrap_servers)

    def kafka_settings(self) -> dict[str, Any]:
        """The configs and Kafka credentials (secrets included: never print them), URL properties as the
        allowlist parsed and judged them."""
        merged = {**self.configs, **self.kafka_credentials()}
        for key in URL_PROPERTIES & merged.keys():
            merged[key] = checked_url(f"configs[{key!r}]", merged[key]).text
        return merged

    def registry_credentials(self) -> dict[str, str]:
        """The Schema Registry's (stream_registry.formats), never librdkafka's."""
        return {k: str(v) for k, v in self.credentials.items() if k.startswith(REGISTRY_CREDENTIAL_PREFIX)}

    def client_config(self) -> dict[str, Any]:
        """librdkafka configuration for this stream (secrets included: never print it): the broker list and
        URL properties as the allowlists parsed them."""
        return {**self.kafka_settings(), "bootstrap.servers": self.bootstrap.text, "group.id": self.group_id}

    def validate(self) -> None:
        """Raise ConfigError naming the first bad field and its value (secrets masked)."""
        try:
            self._validate()
        except ConfigError as exc:
            raise ConfigError(redact_error(str(exc), self.secret_values())) from None

    def _validate(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name) or len(self.name) > MAX_NAME_LENGTH:
            raise ConfigError(f"name: {self.name!r} is not a valid stream name "
                              f"([A-Za-z_][A-Za-z0-9_]*, at most {MAX_NAME_LENGTH} characters)")
        if not self.topics:
            raise ConfigError("topics: at least one topic is required, got []")
        for topic in self.topics:
            if (not isinstance(topic, str) or not _TOPIC.match(topic) or len(topic) > MAX_TOPIC_LENGTH
                    or topic in (".", "..")):
                raise ConfigError(f"topics: {topic!r} is not a valid Kafka topic name "
                                  f"([A-Za-z0-9._-], 1 to {MAX_TOPIC_LENGTH} characters)")
        if len(set(self.topics)) != len(self.topics):
            raise ConfigError(f"topics: duplicate topic in {list(self.topics)!r}")
        checked_bootstrap("bootstrap_servers", self.bootstrap_servers)
        if self.consumer_group is not None and (not isinstance(self.consumer_group, str)
                                                or not self.consumer_group.strip()):
            raise ConfigError(f"consumer_group: {self.consumer_group!r} is not a valid group id")
        if self.consumer_group is not None:
            clean_text("consumer_group", self.consumer_group, "group id")
        for name in ("batch_size", "batch_interval_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name}: must be a positive integer, got {value!r}")
        if type(self.commit_interval_ms) is not int or not 0 <= self.commit_interval_ms <= MAX_COMMIT_INTERVAL_MS:
            raise ConfigError(f"{_option_name('commit_interval_ms')}: must be an integer from 0 to "
                              f"{MAX_COMMIT_INTERVAL_MS}, got {_shown_value(self.commit_interval_ms)}")
        for name, kind in _ENUM_FIELDS.items():
            if not isinstance(getattr(self, name), kind):
                raise ConfigError(f"{_option_name(name)}: expected one of "
                                  f"{', '.join(repr(member.value) for member in kind)}, "
                                  f"got {_shown_value(getattr(self, name))}")
        dlq = self.dead_letter_topic
        if dlq is not None:
            if not isinstance(dlq, str) or not _TOPIC.match(dlq) or len(dlq) > MAX_TOPIC_LENGTH \
                    or dlq in (".", ".."):
                raise ConfigError(f"{_option_name('dead_letter_topic')}: {_shown_value(dlq)} is not a valid "
                                  f"Kafka topic name")
            if dlq in self.topics:
                raise ConfigError(f"{_option_name('dead_letter_topic')}: {dlq!r} is one of the stream's own "
                                  f"topics")
            if self.errors_tolerance != ErrorsTolerance.ALL:
                raise ConfigError(f"{_option_name('dead_letter_topic')}: {dlq!r} needs errors.tolerance 'all' "
                                  f"(got {self.errors_tolerance.value!r})")
        for name in ("dead_letter_context_headers", "bolt_unwind", "check_sink"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{_option_name(name)}: expected true or false, "
                                  f"got {_shown_value(getattr(self, name))}")
        if not isinstance(self.transform, str) or "." not in self.transform:
            raise ConfigError(f"transform: expected 'module.function', got {escaped(self.transform)}")
        clean_text("transform", self.transform, "transformation name ('module.function')")
        if not _TRANSFORM.match(self.transform):
            raise ConfigError(f"transform: {escaped(self.transform)} is not a dotted Python name "
                              f"('package.module.function', ASCII letters, digits and _)")
        if not isinstance(self.sink, str) or not self.sink:
            raise ConfigError(f"sink: expected a URI (bolt://host:port or cypherl:///path), got {self.sink!r}")
        parse_sink_uri(self.sink, check_hosts=True)   # the parser and the allowlist the stream opens it with
        check_tasks(self.tasks, self.sink, self.delivery)
        check_engine(self.engine, self.spark_remote, self.spark_master, self.tasks)
        self._validate_configs()
        for key, value in self.credentials.items():
            if not isinstance(key, str) or not key:
                raise ConfigError(f"credentials: keys must be non-empty strings, got {key!r}")
            if not isinstance(value, (str, int, float)):
                raise ConfigError(f"credentials[{key!r}]: expected a string value, got {type(value).__name__}")

    def _validate_configs(self) -> None:
        for key, value in self.configs.items():
            if not isinstance(key, str) or not key:
                raise ConfigError(f"configs: keys must be non-empty strings, got {key!r}")
            if not isinstance(value, (str, int, float, bool)):
                raise ConfigError(f"configs[{key!r}]: expected a string, number or boolean, "
                                  f"got {type(value).__name__}")
        strategy = self.configs.get("partition.assignment.strategy")
        if strategy is not None:
            chosen = {part.strip() for part in str(strategy).split(",")}
            if not chosen <= ASSIGNMENT_STRATEGIES:
                raise ConfigError(f"configs['partition.assignment.strategy']: {strategy!r} is not one of "
                                  f"{', '.join(sorted(ASSIGNMENT_STRATEGIES))}")
        protocol = self.configs.get("group.protocol")
        if protocol is not None and protocol not in GROUP_PROTOCOLS:
            raise ConfigError(f"configs['group.protocol']: {protocol!r} is not one of "
                              f"{', '.join(sorted(GROUP_PROTOCOLS))}")


def alter_fields(changes: Any) -> dict[str, Any]:
    """`alter`'s changes by field name (Kafka Connect's option names, as create takes them, become the fields);
    ConfigError naming a field alter cannot change, why, and what to do instead."""
    if not isinstance(changes, Mapping):
        raise ConfigError(f"changes: expected a map of fields to change, got {type(changes).__name__}")
    fields: dict[str, Any] = {OPTION_FIELDS.get(str(key), str(key)): value for key, value in changes.items()}
    for key in sorted(str(k) for k in fields if k not in ALTERABLE_FIELDS):
        why = _NOT_ALTERABLE.get(key)
        shown = _option_name(key) if why else repr(key)
        raise ConfigError(f"{shown}: cannot be altered{f' ({why})' if why else ''}: drop the stream and create it "
                          f"again to change it (alterable: {', '.join(_option_name(f) for f in ALTERABLE_FIELDS)})")
    if not fields:
        raise ConfigError(f"changes: nothing to change; give at least one of {', '.join(ALTERABLE_FIELDS)}")
    return fields


def _option_name(field_name: str) -> str:
    """How an error names a setting: Kafka Connect's key where there is one, with the Python field."""
    key = next((k for k, f in OPTION_FIELDS.items() if f == field_name), field_name)
    return key if key == field_name else f"{key} ({field_name})"


def _secrets_of(configs: Any, credentials: Any) -> list[str]:
    """secret_values of containers that may not have been checked yet."""
    def usable(value: Any) -> Mapping:
        return {k: v for k, v in value.items() if isinstance(k, str)} if isinstance(value, Mapping) else {}
    return secret_values(usable(configs), usable(credentials))


def _shown_value(value: Any, limit: int = 80) -> str:
    """A value for an error message, cut short so a huge input cannot flood a log."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
