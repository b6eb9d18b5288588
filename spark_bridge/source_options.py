"""The data source's options, parsed and checked without Spark or a cluster.

They mirror Spark's JVM Kafka source (`format("kafka")`) so a job can switch
between the two. Offsets in JSON use Spark's dialect: -2 is earliest and -1 is
latest, the reverse of Memgraph's `-1` beginning / `-2` end that the registry's
offset specs speak. This module translates Spark's dialect into the registry's
offset targets (one parser for the registry's own forms stays in
`stream_registry.offset_spec`); the two dialects never meet.

Every error is a ConfigError whose message starts with the option's name.
"""
from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from stream_registry.errors import ConfigError
from stream_registry.graph.sinks.schemes import validate_sink_uri
from stream_registry.kafka.client import new_consumer
from stream_registry.model import PartitionKey
from stream_registry.offset_spec import Absolute, AtTime, Committed, Earliest, Latest, OffsetSpec, Target
from stream_registry.redaction import secret_values

from .range_plan import OffsetRange, ranges_from_json

SHORT_NAME = "mgstreams_kafka"
STATE_DIR_ENV = "MGSTREAMS_STATE_DIR"

# Spark JSON dialect (= librdkafka's raw constants).
SPARK_EARLIEST = -2
SPARK_LATEST = -1

_SUBSCRIPTIONS = ("subscribe", "assign", "subscribePattern")
# kafka.* settings the JVM source refuses because it manages them itself.
_MANAGED = {
    "auto.offset.reset": "set startingOffsets instead",
    "enable.auto.commit": "the source never commits offsets",
    "key.deserializer": "keys are always returned as binary",
    "value.deserializer": "values are always returned as binary",
    "interceptor.classes": "not supported",
    "enable.partition.eof": "the source needs partition EOF events to end ranges",
}
_KNOWN = {s.lower() for s in (
    *_SUBSCRIPTIONS, "startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
    "startingOffsetsByTimestamp", "endingOffsetsByTimestamp", "minPartitions", "maxRecordsPerPartition",
    "failOnDataLoss", "includeHeaders", "groupIdPrefix", "kafkaConsumer.pollTimeoutMs",
    "offsetRanges", "path", "stream", "stateDir")}
# Options of the streaming reader only (readStream; see stream_reader).
_STREAMING = {s.lower(): s for s in ("maxOffsetsPerTrigger", "controlDir", "resumeFrom", "sink", "sinkStream")}
RESUME_FROM = ("checkpoint", "group", "graph")
_BATCH_ONLY = {s.lower(): s for s in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp", "offsetRanges")}
# JVM options that only make sense for streaming or that this source does not implement.
_UNSUPPORTED = {s.lower(): s for s in (
    "minOffsetsPerTrigger", "maxTriggerDelay", "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs", "startingOffsetsByTimestampStrategy")}


@dataclass(frozen=True)
class SourceOptions:
    """Everything a read needs, checked: the plan inputs and the consumer settings."""
    bootstrap_servers: str
    client_config: Mapping[str, str]          # librdkafka settings (kafka.* without the prefix)
    topics: tuple[str, ...] | Mapping[str, tuple[int, ...]]
    starting: OffsetSpec
    ending: OffsetSpec
    group_id: str
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    ranges: tuple[OffsetRange, ...] | None = None   # offsetRanges: an exact plan, skips planning
    secrets: tuple[str, ...] = field(default=(), repr=False)
    stream: str | None = None       # a registered stream: `committed` is its resume point (spark_bridge.handoff)
    state_dir: str | None = None    # its host's state directory (stateDir, else $MGSTREAMS_STATE_DIR)
    # streaming only: admission control, the control channel's directory, where a (re)started query resumes
    max_offsets_per_trigger: int | None = None
    control_dir: str | None = None
    resume_from: str = "checkpoint"   # checkpoint | group | graph (the sink's stored offsets: exactly-once)
    sink: str | None = None           # resumeFrom=graph: the sink holding the stream's offsets (no credentials in
    sink_stream: str | None = None    # a URI; a registered stream's come from its host's state) and their name

    def consumer_config(self) -> dict[str, str]:
        return {**self.client_config, "bootstrap.servers": self.bootstrap_servers, "group.id": self.group_id}


def parse_source_options(options: Mapping[str, str], streaming: bool = False) -> SourceOptions:
    """Check every option (names are case-insensitive, as in Spark) and build SourceOptions; `streaming`: for
    readStream (endingOffsets makes no sense there, startingOffsets may be latest, _STREAMING's are known)."""
    opts = {str(k).lower(): ("" if v is None else str(v)) for k, v in options.items()}
    kafka = {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}
    secrets = tuple(secret_values(kafka))
    for key in opts:
        if key.startswith("kafka."):
            continue
        if key in _STREAMING:
            if not streaming:
                raise ConfigError(f"{_STREAMING[key]}: only for streaming reads (readStream) of the {SHORT_NAME} "
                                  f"source")
            continue
        if streaming and key in _BATCH_ONLY:
            raise ConfigError(f"{_BATCH_ONLY[key]}: not for a streaming read (a stream has no end)")
        if key in _UNSUPPORTED:
            raise ConfigError(f"{_UNSUPPORTED[key]}: not supported by the {SHORT_NAME} batch source")
        if key not in _KNOWN:
            raise ConfigError(f"{key}: unknown option of the {SHORT_NAME} source")
    for key, why in _MANAGED.items():
        if key in kafka:
            raise ConfigError(f"kafka.{key}: not supported ({why})")
    servers = kafka.pop("bootstrap.servers", "").strip()
    if not servers:
        raise ConfigError("kafka.bootstrap.servers: required (host:port[,host:port...])")
    explicit_group = kafka.pop("group.id", "").strip()
    group_id = explicit_group or f"{opts.get('groupidprefix') or 'spark-kafka-relation'}-{uuid.uuid4()}"
    topics = _subscription(opts)
    names = list(topics) if isinstance(topics, Mapping) else topics
    starting = _offsets(opts, "starting", names, streaming)
    ending = _offsets(opts, "ending", names)
    stream = opts.get("stream", "").strip() or None
    if "stream" in opts and not stream:
        raise ConfigError(f"stream: expected the name of a registered stream, got {opts['stream']!r}")
    state_dir = opts.get("statedir", "").strip() or (os.environ.get(STATE_DIR_ENV, "").strip() if stream else "")
    if "statedir" in opts and not stream:
        raise ConfigError(f"stateDir: only means something with the stream option (got {opts['statedir']!r})")
    if stream and not state_dir:
        raise ConfigError(f"stateDir: required with stream={stream!r} (the host's state directory, or set "
                          f"{STATE_DIR_ENV})")
    if _targets(ending, Committed) and not explicit_group and not stream:
        raise ConfigError("endingOffsets: 'committed' needs kafka.group.id (the group whose offsets end the read) "
                          "or stream (a registered stream: where it resumes)")
    parsed = SourceOptions(
        bootstrap_servers=servers, client_config=kafka, topics=topics, starting=starting, ending=ending,
        group_id=group_id,
        min_partitions=_positive_int(opts, "minPartitions"),
        max_records_per_partition=_positive_int(opts, "maxRecordsPerPartition"),
        fail_on_data_loss=_boolean(opts, "failOnDataLoss", True),
        include_headers=_boolean(opts, "includeHeaders", False),
        poll_timeout_ms=_positive_int(opts, "kafkaConsumer.pollTimeoutMs") or 120_000,
        ranges=_ranges(opts), secrets=secrets, stream=stream, state_dir=state_dir or None,
        **(_streaming_options(opts) if streaming else {}))
    check_client_config(parsed.consumer_config(), secrets)
    return parsed


def include_headers(options: Mapping[str, str]) -> bool:
    """The includeHeaders option alone (what the row schema depends on, for batch and streaming reads alike)."""
    return _boolean({str(k).lower(): ("" if v is None else str(v)) for k, v in options.items()}, "includeHeaders",
                    False)


def check_client_config(config: Mapping[str, object], secrets: Iterable[str] = ()) -> None:
    """Let librdkafka vet the settings without connecting; name the offending kafka.* option."""
    new_consumer(config, secrets, field="kafka.*").close()


# -- subscription -------------------------------------------------------------------
def _subscription(opts: Mapping[str, str]) -> tuple[str, ...] | dict[str, tuple[int, ...]]:
    given = [name for name in _SUBSCRIPTIONS if name.lower() in opts]
    if len(given) != 1:
        raise ConfigError(f"subscribe: exactly one of {', '.join(_SUBSCRIPTIONS)} must be set "
                          f"(got {', '.join(given) or 'none'})")
    which = given[0]
    value = opts[which.lower()].strip()
    if which == "subscribePattern":
        raise ConfigError("subscribePattern: not supported by the batch source; list topics with subscribe")
    if which == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise ConfigError(f"subscribe: expected a comma-separated list of topics, got {value!r}")
        return topics
    parsed = _json(value, "assign")
    if not isinstance(parsed, dict) or not parsed or not all(
            isinstance(ps, list) and ps and all(type(p) is int and p >= 0 for p in ps) for ps in parsed.values()):
        raise ConfigError(f"assign: expected JSON like {{\"topicA\":[0,1],\"topicB\":[2,4]}}, got {value!r}")
    return {topic: tuple(sorted(set(ps))) for topic, ps in parsed.items()}


# -- offsets in Spark's dialect --------------------------------------------------------
def _streaming_options(opts: Mapping[str, str]) -> dict:
    resume_from = opts.get("resumefrom", "checkpoint").strip().lower() or "checkpoint"
    if resume_from not in RESUME_FROM:
        raise ConfigError(f"resumeFrom: expected one of {', '.join(RESUME_FROM)}, got {opts['resumefrom']!r}")
    sink, sink_stream = opts.get("sink", "").strip() or None, opts.get("sinkstream", "").strip() or None
    if resume_from == "graph" and not (sink and sink_stream):
        raise ConfigError(f"sink: resumeFrom=graph needs sink (the graph's URI) and sinkStream (the name its offsets "
                          f"are stored under), got sink={sink!r}, sinkStream={sink_stream!r}")
    if sink:
        validate_sink_uri(sink)
    control = opts.get("controldir", "").strip()
    if not control:
        raise ConfigError("controlDir: required for a streaming read (the stream's control directory, where "
                          "offset changes reach the running query)")
    return {"max_offsets_per_trigger": _positive_int(opts, "maxOffsetsPerTrigger"), "control_dir": control,
            "resume_from": resume_from, "sink": sink, "sink_stream": sink_stream}


def _offsets(opts: Mapping[str, str], which: str, topics, streaming: bool = False) -> OffsetSpec:
    """starting*/ending* options in the JVM source's precedence: timestamp, by-timestamp, offsets."""
    timestamp, by_timestamp, offsets = f"{which}Timestamp", f"{which}OffsetsByTimestamp", f"{which}Offsets"
    if timestamp.lower() in opts:
        return OffsetSpec(default=_at_time(opts[timestamp.lower()], timestamp))
    if by_timestamp.lower() in opts:
        return _by_partition(opts[by_timestamp.lower()], by_timestamp, topics,
                             lambda raw, where: _at_time(raw, where))
    if offsets.lower() not in opts:
        return OffsetSpec(default=Earliest() if which == "starting" else Latest())
    if streaming and opts[offsets.lower()].strip().lower() == "latest":
        return OffsetSpec(default=Latest())
    return spark_offsets(opts[offsets.lower()], offsets, topics)


def spark_offsets(value: str, option: str, topics=()) -> OffsetSpec:
    """`startingOffsets` / `endingOffsets` in Spark's dialect as a registry OffsetSpec.

    "earliest", "latest", or JSON `{"topic": {"0": 23, "1": -2}}` where -2 means
    earliest and -1 latest (NOT Memgraph's -1 beginning / -2 end). As in the JVM
    source, a batch may not start at latest nor end at earliest. `committed`
    (the group's committed offsets; with the `stream` option, where that stream
    resumes) is an extension for endingOffsets.
    """
    text = value.strip()
    ending = option.lower().startswith("ending")
    lowered = text.lower()
    if lowered in ("earliest", "latest"):
        bound = Earliest() if lowered == "earliest" else Latest()
        _check_batch_bound(option, bound, ending)
        return OffsetSpec(default=bound)
    if lowered == "committed" and ending:
        return OffsetSpec(default=Committed())
    if not text.startswith("{"):
        raise ConfigError(f"{option}: expected 'earliest', 'latest'{', committed' if ending else ''} or JSON "
                          f"like {{\"topic\":{{\"0\":23,\"1\":-2}}}} (-2 = earliest, -1 = latest), got {value!r}")

    def target(raw: object, where: str) -> Target:
        if type(raw) is not int:
            raise ConfigError(f"{where}: expected an integer offset, got {raw!r}")
        if raw >= 0:
            return Absolute(raw)
        if raw not in (SPARK_EARLIEST, SPARK_LATEST):
            raise ConfigError(f"{where}: invalid offset {raw}; use >= 0, -2 (earliest) or -1 (latest) "
                              f"(Spark's dialect)")
        chosen = Earliest() if raw == SPARK_EARLIEST else Latest()
        _check_batch_bound(where, chosen, ending)
        return chosen
    return _by_partition(text, option, topics, target)


def _check_batch_bound(where: str, target: Target, ending: bool) -> None:
    if ending and isinstance(target, Earliest):
        raise ConfigError(f"{where}: ending offset 'earliest' (-2) is not allowed for batch queries")
    if not ending and isinstance(target, Latest):
        raise ConfigError(f"{where}: starting offset 'latest' (-1) is not allowed for batch queries")


def _by_partition(text: str, option: str, topics, to_target) -> OffsetSpec:
    parsed = _json(text, option)
    if not isinstance(parsed, dict) or not parsed:
        raise ConfigError(f"{option}: expected a JSON object of topics, got {text!r}")
    partitions: dict[PartitionKey, Target] = {}
    for topic, per_partition in parsed.items():
        if topics and topic not in topics:
            raise ConfigError(f"{option}: topic {topic!r} is not subscribed ({', '.join(topics)})")
        if not isinstance(per_partition, dict) or not per_partition:
            raise ConfigError(f"{option}: expected {{\"partition\": offset}} for topic {topic!r}, "
                              f"got {per_partition!r}")
        for key, raw in per_partition.items():
            if not str(key).isdigit():
                raise ConfigError(f"{option}: partition {key!r} of topic {topic!r} is not a number")
            partitions[PartitionKey(str(topic), int(key))] = to_target(raw, f"{option}[{topic}][{key}]")
    return OffsetSpec(partitions=partitions)


def _at_time(raw, where: str) -> AtTime:
    if isinstance(raw, str) and raw.strip().lstrip("-").isdigit():
        raw = int(raw.strip())
    if type(raw) is not int or raw < 0:
        raise ConfigError(f"{where}: expected a timestamp in milliseconds since the epoch, got {raw!r}")
    text = datetime.fromtimestamp(raw / 1000, tz=UTC).isoformat(timespec="milliseconds")
    return AtTime(raw, text)


def _targets(spec: OffsetSpec, kind) -> bool:
    return any(isinstance(t, kind) for t in (spec.default, *spec.topics.values(), *spec.partitions.values()))


# -- scalars ---------------------------------------------------------------------------------
def _json(text: str, option: str):
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{option}: not valid JSON ({exc}): {text!r}") from None


def _positive_int(opts: Mapping[str, str], option: str) -> int | None:
    raw = opts.get(option.lower())
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"{option}: expected a positive integer, got {raw!r}")
    return value


def _boolean(opts: Mapping[str, str], option: str, default: bool) -> bool:
    raw = opts.get(option.lower())
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered not in ("true", "false"):
        raise ConfigError(f"{option}: expected true or false, got {raw!r}")
    return lowered == "true"


def _ranges(opts: Mapping[str, str]) -> tuple[OffsetRange, ...] | None:
    raw = opts.get("offsetranges")
    if raw is None:
        return None
    try:
        return tuple(ranges_from_json(raw))
    except ConfigError as exc:
        raise ConfigError(f"offsetRanges: {exc}") from None
