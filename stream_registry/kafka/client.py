"""Creating confluent-kafka consumers with errors users can act on and that carry no secrets."""
from __future__ import annotations

from typing import Iterable, Mapping

from confluent_kafka import Consumer, KafkaException

from ..errors import ConfigError
from ..redaction import redact


def new_consumer(config: Mapping[str, object], secrets: Iterable[str] = (), field: str = "configs") -> Consumer:
    """A consumer, or a ConfigError naming `field` and what librdkafka rejected (secrets masked)."""
    try:
        return Consumer(dict(config))
    except (KafkaException, ValueError, TypeError) as exc:
        text = redact(str(exc.args[0] if exc.args else exc), secrets)
        raise ConfigError(f"{field}: rejected by the Kafka client: {text}") from None
