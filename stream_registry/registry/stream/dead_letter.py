"""Messages set aside by errors.tolerance 'all': to the dead-letter topic, or skipped and recorded.

A dead-lettered message keeps its key, value, timestamp and headers, and gains
context headers named as Kafka Connect names them (its DeadLetterQueueReporter),
so tools written for Connect's dead-letter topics read ours. Each one is
produced and flushed before the stream goes on: when that fails, the batch is
not committed, so a message is never lost.
"""
from __future__ import annotations

import traceback
from collections.abc import Callable
from enum import StrEnum

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError, KafkaException, Producer
from confluent_kafka.admin import NewTopic

from ...config import StreamConfig
from ...errors import ConfigError, StreamError, TransformError
from ...kafka.client import new_admin, new_producer

DEAD_LETTER_TIMEOUT_S = 10.0   # a produce not acknowledged within this fails the batch (retried)
STREAM_HEADER = "mgstreams.stream"


class DeadLetterError(StreamError):
    """A poison message could not be written to the dead-letter topic; its batch stays uncommitted."""


class Stage(StrEnum):
    """Where a message failed, in Connect's `__connect.errors.stage` terms."""
    TRANSFORMATION = "TRANSFORMATION"
    SINK = "TASK_PUT"


def failure_cause(error: BaseException) -> BaseException:
    """The exception the user's code raised, not mgstreams' wrapper around it."""
    if isinstance(error, TransformError) and error.__cause__ is not None:
        return error.__cause__
    return error


def context_headers(stream: str, msg, error: BaseException, redact: Callable[[str], str]) -> list[tuple[str, bytes]]:
    """Connect's `__connect.errors.*` headers for one failed message, plus the stream's name."""
    cause = failure_cause(error)
    kind = type(cause)
    class_name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    stage = Stage.TRANSFORMATION if isinstance(error, TransformError) else Stage.SINK
    stacktrace = "".join(traceback.format_exception(kind, cause, cause.__traceback__))
    fields = {
        "__connect.errors.topic": msg.topic(),
        "__connect.errors.partition": str(msg.partition()),
        "__connect.errors.offset": str(msg.offset()),
        "__connect.errors.stage": stage.value,
        "__connect.errors.exception.class.name": class_name,
        "__connect.errors.exception.message": redact(str(cause)),
        "__connect.errors.exception.stacktrace": redact(stacktrace),
        STREAM_HEADER: stream,
    }
    return [(key, value.encode()) for key, value in fields.items()]


class DeadLetterQueue:
    """The stream's dead-letter topic: one producer, created (with the topic, if missing) at first use."""

    def __init__(self, config: StreamConfig, redact: Callable[[str], str], timeout_s: float = DEAD_LETTER_TIMEOUT_S):
        if not config.dead_letter_topic:
            raise ConfigError(f"dead_letter_topic: stream {config.name!r} has none")
        self.topic: str = config.dead_letter_topic
        self._config, self._redact, self._timeout_s = config, redact, timeout_s
        self._producer: Producer | None = None

    def send(self, msg, error: BaseException) -> None:
        """Produce `msg` as it came, with context headers; return once the cluster acknowledged it."""
        where = f"{msg.topic()}:{msg.partition()}@{msg.offset()}"
        headers = list(msg.headers() or [])
        if self._config.dead_letter_context_headers:
            headers += context_headers(self._config.name, msg, error, self._redact)
        kind, timestamp = msg.timestamp()
        outcome: list = []
        try:
            producer = self._open()
            producer.produce(self.topic, value=msg.value(), key=msg.key(), headers=headers,
                             timestamp=timestamp if kind != TIMESTAMP_NOT_AVAILABLE else 0,
                             on_delivery=lambda err, _msg: outcome.append(err))
            producer.flush(self._timeout_s)
        except (KafkaException, BufferError, StreamError) as exc:
            outcome.append(exc)
        if not outcome or outcome[0] is not None:
            reason = outcome[0].str() if outcome and isinstance(outcome[0], KafkaError) else \
                str(outcome[0]) if outcome else f"not acknowledged within {self._timeout_s:g} s"
            raise DeadLetterError(f"dead_letter_topic: sending {where} to {self.topic!r} failed: "
                                  f"{self._redact(reason)}")

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(self._timeout_s)
            self._producer = None

    def _open(self) -> Producer:
        if self._producer is None:
            settings = self._config.client_config()
            secrets = self._config.secret_values()
            self._create_topic(settings, secrets)
            # One message in flight at a time (each is flushed), so order holds without idempotence, whose
            # producer id costs the first send half a second; a retried batch may dead-letter a message twice.
            self._producer = new_producer({**settings, "acks": "all", "enable.idempotence": False, "linger.ms": 0,
                                           "message.timeout.ms": int(self._timeout_s * 1000)},
                                          secrets, field="dead_letter_topic")
        return self._producer

    def _create_topic(self, settings: dict, secrets) -> None:
        """As Kafka Connect does: a missing dead-letter topic is created (the brokers' defaults); a cluster
        that refuses (no permission, auto-creation policies) leaves it to the produce to say why."""
        admin = new_admin(settings, secrets, field="dead_letter_topic")
        try:
            if self.topic in admin.list_topics(timeout=self._timeout_s).topics:
                return
            future = admin.create_topics([NewTopic(self.topic)], request_timeout=self._timeout_s)[self.topic]
            future.result(self._timeout_s)
        except Exception:   # TOPIC_ALREADY_EXISTS (a race), or refused: the produce reports what matters
            pass
