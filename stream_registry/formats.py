"""Record formats: how a stream's keys and values are decoded before its transformation sees them.

`key.format` and `value.format` name one of `Format`: `bytes` (the default:
nothing is decoded, the transformation gets what Kafka holds), `json`, and
the three formats of a Confluent Schema Registry, `avro`, `protobuf` and
`json_schema`. Those are decoded by confluent-kafka's own deserializers
(`confluent_kafka.schema_registry`): the wire format is a magic byte 0, the
schema id (4 bytes, big-endian), then the record (Protobuf adds its message
indexes); the deserializer fetches the writer's schema by id from the registry
at `schema.registry.url` and caches it.

One decoder serves the stream process, a preview (`check`) and the Spark
backfill (spark_bridge.job), so all three see the same values.

Avro's cost: confluent-kafka's AvroDeserializer walks the writer schema for
tags on every record, most of an Avro stream's CPU. For a writer schema
without rules or references (what the deserializer then does is one
`fastavro.schemaless_reader(payload, writer_schema, None)` call), the first
record of the schema is decoded by the deserializer and the later ones by that
call alone (`_plain_avro_schema`; tests/unit/test_formats.py checks the values
equal the deserializer's). Protobuf: the deserializer parses into one generated
class, which a stream does not have; one is built per writer message type from
the schema the deserializer itself parses (its `_get_parsed_schema` and
`_get_message_desc`).

What goes wrong is decided by type, as everywhere (graph.sink_faults):
- a record that does not decode (a wrong magic byte, a schema id the registry
  does not know, bytes that are not what the schema says) raises DecodeError,
  the message's fault (dead-lettered under errors.tolerance 'all');
- a registry that cannot be reached (a connection error, a timeout, a 5xx, a
  refused credential) raises RegistryUnavailable, transient: the batch is
  retried, and the stream's error names the registry.

Credentials for the registry live in the stream's `credentials` under
REGISTRY_CREDENTIALS (masked everywhere, never given to librdkafka).
"""
from __future__ import annotations

import base64
import datetime as _dt
import decimal
import io
import json
import threading
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from .allowlists import REGISTRY_CREDENTIAL_PREFIX, REGISTRY_CREDENTIALS, checked_url_list
from .errors import ConfigError, DecodeError, RegistryUnavailable
from .http_deadline import bound, deadline
from .redaction import redact


class Format(StrEnum):
    BYTES = "bytes"
    JSON = "json"
    AVRO = "avro"
    PROTOBUF = "protobuf"
    JSON_SCHEMA = "json_schema"

    @property
    def registry(self) -> bool:
        """Whether decoding needs a Schema Registry."""
        return self in (Format.AVRO, Format.PROTOBUF, Format.JSON_SCHEMA)


__all__ = ["REGISTRY_CREDENTIALS", "REGISTRY_CREDENTIAL_PREFIX", "Decoder", "Format", "check_formats",
           "check_registry_url", "plain", "registry_client_conf"]
REGISTRY_TIMEOUT_S = 10    # one socket operation (the client's own timeout)
REGISTRY_DEADLINE_S = 10   # everything one record's decoding asks the registry, retries and fail-over included
REGISTRY_RETRIES = 1


def check_registry_url(value: object) -> str:
    """`schema.registry.url` parsed once, as the list its client reads (addresses.UrlList: comma-separated base
    URLs, each without whitespace, controls, user-info or query; credentials go in the stream's `credentials`,
    never in the URL, which is shown), every member's host allowed (MGSTREAMS_ALLOWED_HOSTS): the text as parsed,
    the only form the registry client is given."""
    return checked_url_list("schema.registry.url", value).text


def check_formats(key_format: object, value_format: object, registry_url: object,
                  credentials: Mapping[str, Any]) -> str | None:
    """ConfigError naming the first bad field: an unknown format, a registry format without a registry URL, a
    URL outside the allowlist, registry credentials given twice or without a registry (the credential keys
    themselves are allowlisted with the others: allowlists.REGISTRY_CREDENTIALS). The registry URL as parsed."""
    formats = []
    for field, value in (("key.format", key_format), ("value.format", value_format)):
        if value not in {f.value for f in Format}:
            raise ConfigError(f"{field}: expected one of {', '.join(repr(f.value) for f in Format)}, "
                              f"got {_shown(value)}")
        formats.append(Format(value))
    needs_registry = any(f.registry for f in formats)
    if registry_url is None:
        if needs_registry:
            wanted = next(f"{field} {f.value!r}" for field, f in zip(("key.format", "value.format"), formats,
                                                                     strict=True) if f.registry)
            raise ConfigError(f"schema.registry.url: {wanted} needs a Schema Registry; give its URL")
        parsed = None
    else:
        parsed = check_registry_url(registry_url)
    registry_keys = [k for k in credentials if isinstance(k, str) and k.startswith(REGISTRY_CREDENTIAL_PREFIX)]
    if registry_keys and registry_url is None:
        raise ConfigError(f"credentials[{registry_keys[0]!r}]: a Schema Registry credential, but the stream has no "
                          f"schema.registry.url")
    if "schema.registry.basic.auth.user.info" in registry_keys and "schema.registry.bearer.auth.token" in \
            registry_keys:
        raise ConfigError("credentials['schema.registry.bearer.auth.token']: give basic-auth or a bearer token for "
                          "the Schema Registry, not both")
    return parsed


def registry_client_conf(url: str, credentials: Mapping[str, Any]) -> dict[str, Any]:
    """confluent-kafka's SchemaRegistryClient configuration (secrets included: never print it)."""
    conf: dict[str, Any] = {"url": url, "timeout": REGISTRY_TIMEOUT_S, "max.retries": REGISTRY_RETRIES,
                            "retries.wait.ms": 200, "retries.max.wait.ms": 1000}   # the batch's retry does the rest
    own = {k[len(REGISTRY_CREDENTIAL_PREFIX):]: str(v) for k, v in credentials.items()
           if isinstance(k, str) and k.startswith(REGISTRY_CREDENTIAL_PREFIX)}
    if "basic.auth.user.info" in own:
        conf["basic.auth.user.info"] = own["basic.auth.user.info"]
    if "bearer.auth.token" in own:
        conf["bearer.auth.credentials.source"] = "STATIC_TOKEN"
        conf["bearer.auth.token"] = own["bearer.auth.token"]
        # confluent-kafka requires both; a registry that is not Confluent Cloud ignores them
        conf["bearer.auth.logical.cluster"] = own.get("bearer.auth.logical.cluster", "")
        conf["bearer.auth.identity.pool.id"] = own.get("bearer.auth.identity.pool.id", "")
    return conf


class Decoder:
    """Decodes one stream's keys and values (see the module docstring). Built once per stream process (or Spark
    task); the registry client and the deserializers are made at first use and cache what they fetch."""

    def __init__(self, key_format: Format | str = Format.BYTES, value_format: Format | str = Format.BYTES,
                 registry_url: str | None = None, credentials: Mapping[str, Any] | None = None):
        self.key_format, self.value_format = Format(key_format), Format(value_format)
        self.registry_url = registry_url
        self._credentials = dict(credentials or {})
        self._secrets = [str(v) for k, v in self._credentials.items()
                         if isinstance(k, str) and k.startswith(REGISTRY_CREDENTIAL_PREFIX)]
        self._lock = threading.Lock()
        self._client: Any = None
        self._deserializers: dict[tuple[str, bool], Any] = {}
        self._avro_plain: dict[int, Any] = {}
        self._contexts: dict[tuple[str, bool], Any] = {}

    @classmethod
    def for_stream(cls, config: Any) -> Decoder:
        """The decoder of a StreamConfig (its key_format, value_format, schema_registry_url, credentials)."""
        return cls(config.key_format, config.value_format, config.schema_registry_url, config.credentials)

    @property
    def active(self) -> bool:
        """False when both are bytes: messages are passed on as they are."""
        return self.key_format is not Format.BYTES or self.value_format is not Format.BYTES

    def decode(self, topic: str, data: bytes | None, *, key: bool = False) -> Any:
        """The decoded key or value of a record of `topic` (null, or empty, is None)."""
        fmt = self.key_format if key else self.value_format
        if fmt is Format.BYTES:
            return data
        if not data:   # a null record (a tombstone): a Message's payload() gives it as b""
            return None
        if fmt is Format.JSON:
            try:
                return json.loads(data)
            except ValueError as exc:
                raise DecodeError(f"{'key' if key else 'value'} is not JSON ({exc})") from None
        return self._registry_decode(fmt, topic, data, key)

    # -- the registry formats -----------------------------------------------------------------------
    def _registry_decode(self, fmt: Format, topic: str, data: bytes, key: bool) -> Any:
        field = "key" if key else "value"
        if len(data) < 5 or data[0] != 0:
            raise DecodeError(f"{field} is not in the Schema Registry wire format: its first byte is "
                              f"{data[:1].hex() or 'missing'}, expected magic byte 00 then a 4-byte schema id "
                              f"({len(data)} bytes)")
        schema_id = int.from_bytes(data[1:5], "big")
        if fmt is Format.AVRO:
            plain_schema = self._avro_plain.get(schema_id)
            if plain_schema:
                try:
                    return plain(_schemaless_reader()(io.BytesIO(data[5:]), plain_schema, None, False))
                except Exception as exc:
                    raise DecodeError(f"{field} does not decode as avro with schema id {schema_id}: "
                                      f"{type(exc).__name__}: {self._redact(exc)}") from None
        sr = _confluent()
        ctx = self._context(topic, key)
        try:
            with deadline(REGISTRY_DEADLINE_S):   # a registry that drips its answer ends here (http_deadline)
                if fmt is Format.PROTOBUF:
                    value = self._protobuf(data, ctx, schema_id, key)
                else:
                    value = self._deserializer(fmt, key)(data, ctx)
                    if fmt is Format.AVRO and schema_id not in self._avro_plain:
                        self._avro_plain[schema_id] = self._plain_avro_schema(schema_id)
        except sr.SchemaRegistryError as exc:
            status = exc.http_status_code
            if status == 404:
                raise DecodeError(f"{field}: schema id {schema_id} is not known to the Schema Registry at "
                                  f"{self.registry_url} ({self._redact(exc.error_message)})") from None
            raise RegistryUnavailable(f"{field}: the Schema Registry at {self.registry_url} answered HTTP {status} "
                                      f"for schema id {schema_id}: {self._redact(exc.error_message)}") from None
        except (sr.SerializationError, DecodeError) as exc:
            raise DecodeError(f"{field} does not decode as {fmt.value} with schema id {schema_id}: "
                              f"{self._redact(exc)}") from None
        except Exception as exc:
            if _unreachable(exc):
                raise RegistryUnavailable(f"{field}: the Schema Registry at {self.registry_url} cannot be reached "
                                          f"({type(exc).__name__}: {self._redact(exc)})") from None
            raise DecodeError(f"{field} does not decode as {fmt.value} with schema id {schema_id}: "
                              f"{type(exc).__name__}: {self._redact(exc)}") from None
        return plain(value)

    def _context(self, topic: str, key: bool) -> Any:
        found = self._contexts.get((topic, key))
        if found is None:
            sr = _confluent()
            found = self._contexts[(topic, key)] = sr.SerializationContext(
                topic, sr.MessageField.KEY if key else sr.MessageField.VALUE)
        return found

    def _plain_avro_schema(self, schema_id: int) -> Any:
        """The parsed writer schema when confluent-kafka's AvroDeserializer, for it, only reads the record
        (`fastavro.schemaless_reader(payload, writer_schema, None)`): no rule set (no transforms, no encryption),
        no references, no reader schema (a stream never sets one). Records of that schema after the first, which
        the deserializer decoded, are then read by that call alone, without the deserializer's per-record schema
        walk (its cost is most of an Avro stream's: bench/ingest_throughput.py --value-format avro). False: the
        deserializer decodes every record of it."""
        try:
            schema = self._registry().get_schema(schema_id)
            if schema.rule_set is not None or schema.references or schema.schema_type not in (None, "AVRO"):
                return False
            from fastavro import parse_schema
            return parse_schema(json.loads(str(schema.schema_str)))
        except Exception:   # the deserializer, which read it, decides; it goes on doing so
            return False

    def _registry(self) -> Any:
        with self._lock:
            if self._client is None:
                from confluent_kafka.schema_registry import SchemaRegistryClient
                self._client = SchemaRegistryClient(registry_client_conf(str(self.registry_url), self._credentials))
                bound(self._client._rest_client.session)   # the total deadline under its own HTTP session
            return self._client

    def _deserializer(self, fmt: Format, key: bool) -> Any:
        found = self._deserializers.get((fmt.value, key))
        if found is not None:
            return found
        client = self._registry()
        if fmt is Format.AVRO:
            from confluent_kafka.schema_registry.avro import AvroDeserializer
            made = AvroDeserializer(client)
        else:
            from confluent_kafka.schema_registry.json_schema import JSONDeserializer
            made = JSONDeserializer(None, schema_registry_client=client)
        return self._deserializers.setdefault((fmt.value, key), made)

    def _protobuf(self, data: bytes, ctx: Any, schema_id: int, key: bool) -> Any:
        """confluent-kafka's ProtobufDeserializer parses into one generated class; a stream has none, so one
        deserializer per writer message type (schema id and message indexes) is made, its class built from the
        writer's schema as the deserializer itself finds it."""
        from confluent_kafka.schema_registry import dual_schema_id_deserializer
        from confluent_kafka.schema_registry.common.protobuf import PROTOBUF_TYPE
        from confluent_kafka.schema_registry.common.serde import SchemaId
        from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
        from google.protobuf import empty_pb2
        from google.protobuf.message_factory import GetMessageClass
        parsed = SchemaId(PROTOBUF_TYPE)
        dual_schema_id_deserializer(data, ctx, parsed)
        cache_key = (f"protobuf:{schema_id}:{parsed.message_indexes}", key)
        deserializer = self._deserializers.get(cache_key)
        if deserializer is None:
            client = self._registry()
            probe = ProtobufDeserializer(empty_pb2.Empty, {}, client)
            writer = client.get_schema(schema_id, fmt="serialized")
            fd_proto, pool = probe._get_parsed_schema(writer)
            descriptor = probe._get_message_desc(pool, pool.FindFileByName(fd_proto.name),
                                                 list(parsed.message_indexes or [0]))
            deserializer = ProtobufDeserializer(GetMessageClass(descriptor), {}, client)
            self._deserializers[cache_key] = deserializer
        return _protobuf_dict(deserializer(data, ctx))

    def _redact(self, value: object) -> str:
        return redact(str(value), self._secrets)


class _Confluent:
    """confluent-kafka's names the hot path needs, imported once (not at module import: a stream without a
    registry format never needs the schema registry's packages)."""

    def __init__(self) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryError
        from confluent_kafka.serialization import MessageField, SerializationContext, SerializationError
        self.SchemaRegistryError, self.SerializationError = SchemaRegistryError, SerializationError
        self.MessageField, self.SerializationContext = MessageField, SerializationContext


_CONFLUENT: _Confluent | None = None
_READER: Any = None


def _confluent() -> _Confluent:
    global _CONFLUENT
    if _CONFLUENT is None:
        _CONFLUENT = _Confluent()
    return _CONFLUENT


def _schemaless_reader() -> Any:
    global _READER
    if _READER is None:
        from fastavro import schemaless_reader
        _READER = schemaless_reader
    return _READER


def _unreachable(exc: BaseException) -> bool:
    """A transport failure of the registry's HTTP client (httpx or httpx2, whichever confluent-kafka uses)."""
    if isinstance(exc, OSError):
        return True
    try:   # confluent-kafka's own choice of HTTP client: no HTTP library is imported here
        from confluent_kafka.schema_registry.common._httpx_compat import httpx as client
    except ImportError:
        return False
    return isinstance(exc, client.TransportError)


def _protobuf_dict(message: Any) -> dict[str, Any]:
    """A Protobuf message as plain values: field names as declared, 64-bit integers as int (json_format would
    make them strings), enums by name, nested messages as maps."""
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {k: _protobuf_value(value_field, v) for k, v in value.items()}
        elif _repeated(field):
            out[field.name] = [_protobuf_value(field, v) for v in value]
        elif field.message_type is not None and not message.HasField(field.name):
            out[field.name] = None
        else:
            out[field.name] = _protobuf_value(field, value)
    return out


def _repeated(field: Any) -> bool:
    flag = getattr(field, "is_repeated", None)
    return bool(flag) if flag is not None else field.label == field.LABEL_REPEATED


_WRAPPERS = frozenset(f"google.protobuf.{kind}Value" for kind in ("Double", "Float", "Int64", "UInt64", "Int32",
                                                                   "UInt32", "Bool", "String", "Bytes"))


def _protobuf_value(field: Any, value: Any) -> Any:
    if field.message_type is not None:
        if field.message_type.full_name in _WRAPPERS:   # a nullable column: its value (unset is None above)
            return value.value
        return _protobuf_dict(value)
    if field.enum_type is not None:
        found = field.enum_type.values_by_number.get(value)
        return found.name if found is not None else value
    return value


_AS_IS = frozenset({str, int, float, bool, type(None), _dt.date, _dt.time, _dt.datetime})


def plain(value: Any) -> Any:
    """Decoded values as the graph takes them: decimals as text (exact), bytes as base64 text, UUIDs as text;
    dates and times stay (the sinks write them as Cypher temporals). A record of plain values is returned as it
    is (no copy)."""
    kind = type(value)
    if kind in _AS_IS:
        return value
    if kind is dict:
        for item in value.values():
            if type(item) not in _AS_IS:
                return {k: plain(v) for k, v in value.items()}
        return value
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (str, int, float, _dt.date, _dt.time)):   # subclasses (an IntEnum, a pendulum time)
        return value
    return str(value)


def _shown(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
