"""Read-only questions to the cluster about a group's partitions.

A `PartitionQuery` is a consumer that never subscribes: it asks for metadata,
watermarks, committed offsets and offsets by time for a consumer group without
joining it, so it can be used while the stream's own consumer is polling (or
from another process: the CLI, the Spark planner).
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from functools import partial
from typing import Any, TypeVar

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from ..errors import ConfigError, KafkaOperationError
from ..meanwhile import finished_with, meanwhile
from ..model import PartitionKey, PartitionSnapshot
from ..offset_spec import RD_OFFSET_END
from ..redaction import redact, secret_values
from .client import new_admin, new_consumer
from .time_search import RecordReader, first_at_or_after

T = TypeVar("T")

_RETRY_S = 0.1
# Errors that mean "not now" (a leader is moving, a broker is down), not "never".
_TRANSIENT = {"_UNKNOWN_PARTITION", "_TRANSPORT", "_TIMED_OUT", "_WAIT_COORD", "LEADER_NOT_AVAILABLE",
              "NOT_LEADER_FOR_PARTITION", "NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE",
              "COORDINATOR_LOAD_IN_PROGRESS", "REQUEST_TIMED_OUT", "_ALL_BROKERS_DOWN", "_DESTROY_BROKER",
              "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH"}
# After a leader election the admin client can keep asking with the old leader epoch: start a new one.
_STALE_LEADER = {"FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH"}
# No leader known: once its broker is back, the admin client may still wait out its reconnect backoff (up to
# reconnect.backoff.max.ms, 10 s): a new one connects at once. Renewed at most this often.
_LEADERLESS = {"LEADER_NOT_AVAILABLE"}
_RENEW_CLIENT_S = 1.0
# One request's own time: a broker that swallowed a request (it went down with the request in flight) never answers
# it, and asked again on the same connection it answers behind it, so an answer not come by then is asked for again
# by a new client, within the caller's time.
_ATTEMPT_S = 5.0


class PartitionQuery:
    """Metadata and offsets for one consumer group; thread-safe, close() when done."""

    def __init__(self, bootstrap_servers: str, group_id: str, client_config: Mapping[str, str] | None = None,
                 timeout: float = 10.0, secrets: Iterable[str] = ()):
        self._client_config = dict(client_config or {})
        self._secrets = sorted({*secret_values(self._client_config), *secrets}, key=len, reverse=True)
        conf = {**self._client_config, "bootstrap.servers": bootstrap_servers, "group.id": group_id,
                "enable.auto.commit": False, "enable.partition.eof": False,
                "isolation.level": self._client_config.get("isolation.level", "read_committed")}
        self._conf = conf
        self._consumer: Consumer | None = new_consumer(conf, self._secrets)
        self._consumer_since = time.monotonic()
        self._isolation = (IsolationLevel.READ_UNCOMMITTED if conf["isolation.level"] == "read_uncommitted"
                           else IsolationLevel.READ_COMMITTED)
        self._bootstrap_servers = bootstrap_servers
        self._admin: AdminClient | None = None
        self._admin_since = 0.0
        self._admin_client()  # made now, not on first use: a starting stream's first offset change must not wait
        self._lock = threading.Lock()
        self.timeout = timeout

    def close(self) -> None:
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None
            self._admin = None

    def __enter__(self) -> PartitionQuery:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- metadata ---------------------------------------------------------
    def partitions(self, topics: Iterable[str], timeout: float | None = None) -> dict[str, list[int]]:
        """Partition ids per topic; an unknown topic or unreachable cluster raises, naming it."""
        result: dict[str, list[int]] = {}
        timeout = self.timeout if timeout is None else timeout
        for topic in topics:
            metadata = self._call(partial(_topic_metadata, topic),
                                  f"metadata for topic {topic!r} from {self._bootstrap_servers!r}",
                                  field="bootstrap_servers", timeout=timeout)
            info = metadata.topics.get(topic)
            if info is None or info.error is not None or not info.partitions:
                reason = info.error.str() if info is not None and info.error is not None else "no partitions"
                raise ConfigError(f"topics: topic {topic!r} does not exist or is not available ({reason})")
            result[topic] = sorted(info.partitions)
        return result

    # -- offsets ----------------------------------------------------------
    def watermarks(self, tps: Iterable[PartitionKey],
                   timeout: float | None = None) -> dict[PartitionKey, tuple[int, int]]:
        """(log start, log end) per partition; log end is the last stable offset under read_committed.

        Two batched ListOffsets (earliest, latest) for all partitions, both in flight at once: one
        request per leader broker, so 200 partitions cost what 2 do.
        """
        tps = list(tps)
        if not tps:
            return {}
        timeout = self.timeout if timeout is None else timeout
        earliest, latest = self._call(lambda _, attempt_s: self._list_offsets(
            tps, (OffsetSpec.earliest(), OffsetSpec.latest()), attempt_s), "watermarks", timeout=timeout, admin=True)
        return {PartitionKey(*tp): (earliest[tp], latest[tp]) for tp in tps}

    def _list_offsets(self, tps: list[PartitionKey], specs: tuple[OffsetSpec, ...], timeout: float
                      ) -> list[dict[PartitionKey, int]]:
        """The offsets of each spec for `tps`: every spec's ListOffsets is sent before any answer is awaited."""
        admin = self._admin_client()
        requests = [admin.list_offsets({TopicPartition(t, p): spec for t, p in tps}, isolation_level=self._isolation,
                                       request_timeout=max(timeout, 0.1)) for spec in specs]
        deadline = time.monotonic() + timeout
        return [_listed(futures, deadline) for futures in requests]

    def _admin_client(self) -> AdminClient:
        if self._admin is None:
            self._admin_since = time.monotonic()
            self._admin = new_admin({**self._client_config, "bootstrap.servers": self._bootstrap_servers},
                                    self._secrets)
        return self._admin

    def committed(self, tps: Iterable[PartitionKey], timeout: float | None = None) -> dict[PartitionKey, int | None]:
        """The group's committed offset per partition, None where it has none (one batched request)."""
        tps = list(tps)
        if not tps:
            return {}
        timeout = self.timeout if timeout is None else timeout
        answer = self._call(lambda consumer, attempt_s: consumer.committed([TopicPartition(t, p) for t, p in tps],
                                                                           timeout=attempt_s),
                            "committed offsets", timeout=timeout)
        out: dict[PartitionKey, int | None] = {}
        for tp in answer:
            if tp.error is not None:
                raise KafkaOperationError(f"committed offset of {tp.topic}:{tp.partition}: {tp.error.str()}",
                                          code=tp.error.name(), topic=tp.topic, partition=tp.partition)
            out[PartitionKey(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
        return out

    def group_committed(self, group: str, tps: Iterable[PartitionKey],
                        timeout: float | None = None) -> dict[PartitionKey, int | None]:
        """Another consumer group's committed offset per partition, None where it has none: one batched
        OffsetFetch to that group's coordinator (the admin client's ListConsumerGroupOffsets), never joining it."""
        tps = list(tps)
        if not tps:
            return {}
        timeout = self.timeout if timeout is None else timeout

        def ask(_consumer: Consumer, attempt_s: float) -> Any:
            futures = self._admin_client().list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in tps])],
                request_timeout=attempt_s)
            [future] = futures.values()
            try:
                return future.result(attempt_s)
            except FutureTimeout:
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"no answer for group {group!r}")) from None

        answer = self._call(ask, f"committed offsets of group {group!r}", timeout=timeout, admin=True)
        out: dict[PartitionKey, int | None] = {}
        for tp in answer.topic_partitions:
            if tp.error is not None:
                raise KafkaOperationError(f"committed offset of group {group!r} on {tp.topic}:{tp.partition}: "
                                          f"{tp.error.str()}", code=tp.error.name(), topic=tp.topic,
                                          partition=tp.partition)
            out[PartitionKey(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
        return out

    def offsets_for_times(self, queries: list[tuple[str, int, int]],
                          deadline: float | None = None) -> dict[PartitionKey, int | None]:
        """First offset with timestamp >= ts per partition, None where there is none.

        The broker's answer is checked: when it says "none" but the partition's
        last record is at or after the time (brokers without a time index, such
        as the embedded cluster), the offset is found by binary search over
        record timestamps instead of trusting the answer. The whole lookup ends
        by `deadline` (time.monotonic(); default: `timeout` from now) or raises
        KafkaOperationError saying so.
        """
        if not queries:
            return {}
        deadline = time.monotonic() + self.timeout if deadline is None else deadline
        answer = self._call(lambda consumer, attempt_s: consumer.offsets_for_times(
            [TopicPartition(t, p, ts) for t, p, ts in queries], timeout=attempt_s),
            "offsets for times", timeout=_left(deadline))
        wanted = {(t, p): ts for t, p, ts in queries}
        out: dict[PartitionKey, int | None] = {}
        for tp in answer:
            key = PartitionKey(tp.topic, tp.partition)
            if tp.error is not None:
                raise KafkaOperationError(f"offset by time of {tp.topic}:{tp.partition}: {tp.error.str()}",
                                          code=tp.error.name(), topic=tp.topic, partition=tp.partition)
            if tp.offset >= 0:
                out[key] = tp.offset
            elif tp.offset == RD_OFFSET_END or tp.offset < 0:
                out[key] = self._search_by_time(tp.topic, tp.partition, wanted[key], deadline)
        return out

    def snapshots(self, tps: Iterable[PartitionKey], positions: Mapping[PartitionKey, int] | None = None,
                  deadline: float | None = None) -> list[PartitionSnapshot]:
        """Watermarks and committed offsets of `tps`, finished by `deadline` (time.monotonic()) if given."""
        keys = [PartitionKey(*tp) for tp in tps]

        def left() -> float | None:
            return None if deadline is None else max(deadline - time.monotonic(), 0.1)
        timeout = left()
        asked = meanwhile(lambda: self.committed(keys, timeout))   # the group's coordinator, while the leaders answer
        marks = finished_with(asked, lambda: self.watermarks(keys, left()))
        committed = asked.result()
        positions = positions or {}
        return [PartitionSnapshot(topic=key.topic, partition=key.partition, log_start=marks[key][0],
                                  log_end=marks[key][1], committed=committed.get(key), position=positions.get(key))
                for key in keys]

    # -- internals --------------------------------------------------------
    def _search_by_time(self, topic: str, partition: int, ts: int, deadline: float) -> int | None:
        """The first offset at or after `ts` found by reading record timestamps (time_search.py), by `deadline`."""
        key = PartitionKey(topic, partition)
        low, high = self.watermarks([key], _left(deadline))[key]
        if high <= low:
            return None
        reader = new_consumer({**self._client_config, "bootstrap.servers": self._bootstrap_servers,
                               "group.id": "mgstreams-time-probe", "enable.auto.commit": False,
                               "enable.partition.eof": True, "fetch.wait.max.ms": 10}, self._secrets)
        try:
            return first_at_or_after(RecordReader(reader, topic, partition, deadline, self.timeout), ts, low, high)
        finally:
            reader.close()

    def _call(self, fn: Callable[[Consumer, float], T], what: str, *, field: str | None = None,
              topic: str | None = None, partition: int | None = None, timeout: float | None = None,
              admin: bool = False) -> T:
        """Run one client call with the query's consumer (under its lock, so close() cannot pull it away), giving each
        attempt its time (at most _ATTEMPT_S of the caller's); transient errors (leader moves, a broker down) are
        retried until timeout, and a client whose request went unanswered is replaced first. `admin`: the call uses
        only the admin client, which close() merely lets go of, so it runs outside the lock, beside a consumer
        call."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            with contextlib.nullcontext() if admin else self._lock:
                if self._consumer is None:
                    raise KafkaOperationError(f"{what}: the query client is closed")
                try:
                    return fn(self._consumer, min(_left(deadline), _ATTEMPT_S))
                except KafkaException as exc:
                    err = exc.args[0] if exc.args else None
            code = err.name() if isinstance(err, KafkaError) else None
            retry = code in _TRANSIENT and time.monotonic() + _RETRY_S < deadline
            if code in _STALE_LEADER or ((code in _LEADERLESS or (admin and code == "_TIMED_OUT")) and
                                         time.monotonic() - self._admin_since >= _RENEW_CLIENT_S):
                self._admin = None
            elif retry and code == "_TIMED_OUT" and not admin:
                self._renew_consumer()
            if retry:
                time.sleep(_RETRY_S)
                continue
            text = err.str() if isinstance(err, KafkaError) else str(err)
            prefix = f"{field}: " if field else ""
            raise KafkaOperationError(f"{prefix}{what} failed: {redact(text, self._secrets)} ({code})",
                                      code=code, topic=topic, partition=partition)

    def _renew_consumer(self) -> None:
        """A new consumer in place of one whose request went unanswered (at most every _RENEW_CLIENT_S). The old one
        is closed here: it never joined the group, so closing asks no broker (measured: 1-5 ms with the request
        still in flight), and no client is left to be destroyed as the process exits."""
        with self._lock:
            old = self._consumer
            if old is None or time.monotonic() - self._consumer_since < _RENEW_CLIENT_S:
                return
            with contextlib.suppress(KafkaException, RuntimeError):
                old.close()
            self._consumer, self._consumer_since = new_consumer(self._conf, self._secrets), time.monotonic()


def _topic_metadata(topic: str, consumer: Consumer, attempt_s: float) -> Any:
    return consumer.list_topics(topic=topic, timeout=attempt_s)


def _listed(futures: Mapping[TopicPartition, Any], deadline: float) -> dict[PartitionKey, int]:
    """The offsets list_offsets answered, each by `deadline`; an offset no leader gave is an error, not -1."""
    out: dict[PartitionKey, int] = {}
    for tp, future in futures.items():
        try:
            offset = future.result(max(deadline - time.monotonic(), 0.01)).offset
        except FutureTimeout:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT,
                                            f"no answer for {tp.topic}:{tp.partition}")) from None
        except KafkaException as exc:  # librdkafka's "No leaders found" (_NOENT) right after a broker returns
            if exc.args and isinstance(exc.args[0], KafkaError) and exc.args[0].code() == KafkaError._NOENT:
                offset = -1
            else:
                raise
        if offset < 0:  # no leader answered for it (librdkafka's OFFSET_INVALID): not an offset to use
            raise KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE,
                                            f"no leader answered for {tp.topic}:{tp.partition}"))
        out[PartitionKey(tp.topic, tp.partition)] = offset
    return out


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.1)
