"""Creating confluent-kafka consumers with errors users can act on and that carry no secrets."""
from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from ..errors import ConfigError
from ..redaction import is_secret_key, redact

# librdkafka logs a broker failure (facility FAIL) and hands the same text to the client's error_cb: a client with
# one (a stream's consumer, which logs it naming the stream) leaves these lines out, so a failure is said once.
REPORTED_BY_ERROR_CB = frozenset({"FAIL"})


class RedactingLog:
    """librdkafka's log lines (a CONFWARN quotes config values) reach Python logging with secrets masked;
    `skip` names facilities another path reports (confluent-kafka calls log(level, "%s [%s] %s", fac, name, text))."""

    def __init__(self, secrets: Iterable[str], skip: frozenset[str] = frozenset()):
        self._secrets = list(secrets)
        self._skip = skip
        self._log = logging.getLogger("mgstreams.librdkafka")

    def log(self, level: int, message: str, *args: object) -> None:
        if args and args[0] in self._skip:
            return
        text = message % args if args else message
        self._log.log(level, redact(str(text), self._secrets))


def new_consumer(config: Mapping[str, object], secrets: Iterable[str] = (), field: str = "configs") -> Consumer:
    """A consumer, or a ConfigError naming `field` and what librdkafka rejected (secrets masked)."""
    return _new_client(Consumer, config, secrets, field)


def _new_client(kind: type, config: Mapping[str, object], secrets: Iterable[str], field: str):
    secrets = list(secrets)
    try:
        # The redacting logger always, whatever logger the caller's config names: every librdkafka client of
        # every process logs through it (a password used as client.id is quoted by librdkafka's own lines).
        skip = REPORTED_BY_ERROR_CB if config.get("error_cb") is not None else frozenset()
        return kind({**config, "logger": RedactingLog(secrets, skip)})
    except (KafkaException, ValueError, TypeError) as exc:
        error = exc.args[0] if exc.args else exc
        text = redact(error.str() if isinstance(error, KafkaError) else str(error), secrets)
        raise ConfigError(f"{_named(field, config, text, secrets)}rejected by the Kafka client: {text}") from None


_PROPERTY = re.compile(r'(?:property|property:) "([^"]+)"')


def _named(field: str, config: Mapping[str, object], text: str, secrets: list[str]) -> str:
    """`configs['session.timeout.ms']: 'abc' ` when librdkafka's message names a property the config sets (its
    value masked if it is a secret), else `configs: `."""
    found = _PROPERTY.search(text)
    key = found.group(1) if found else None
    if key is None or key not in config:
        return f"{field}: "
    value = "'***'" if is_secret_key(key) else redact(repr(config[key]), secrets)
    return f"{field}[{key!r}]: {value} "


# Consumer-only properties an admin client or a producer would warn about; everything else (security, sockets,
# client id, broker address family, ...) applies to all.
_CONSUMER_ONLY_PREFIXES = ("group.", "partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms",
                           "auto.", "enable.auto.", "enable.partition.eof", "fetch.", "max.poll.interval.ms",
                           "isolation.level", "queued.", "check.crcs", "consume.", "coordinator.")


def new_admin(config: Mapping[str, object], secrets: Iterable[str] = (), field: str = "configs") -> AdminClient:
    """An admin client on the same cluster and security settings as a consumer's `config`."""
    return _new_client(AdminClient, _shared_settings(config), secrets, field)


def new_producer(config: Mapping[str, object], secrets: Iterable[str] = (), field: str = "configs") -> Producer:
    """A producer on the same cluster and security settings as a consumer's `config`."""
    return _new_client(Producer, _shared_settings(config), secrets, field)


def _shared_settings(config: Mapping[str, object]) -> dict[str, object]:
    return {k: v for k, v in config.items() if not k.startswith(_CONSUMER_ONLY_PREFIXES)}
