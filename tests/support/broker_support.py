"""Which broker this test run talks to, and what the tests adapt to it.

- `MGSTREAMS_TEST_BROKER=tansu` (`make test-tansu`): the session starts a Tansu broker process
  (mgstreams.embedded_kafka.TansuBroker) and every broker-facing test runs against it;
- else `KAFKA_BOOTSTRAP_SERVERS=host:port`: a cluster someone else runs;
- else the embedded cluster (librdkafka's mock brokers, in this process).

What Tansu gets wrong is marked where a test meets it: `tansu_limitation("...")` skips the test on Tansu
only, and its reason names the limitation with the evidence (the request, Tansu's answer, what Kafka's
protocol says), so `pytest -ra` lists every one.
"""
from __future__ import annotations

import os

import pytest

BROKER_ENV = "MGSTREAMS_TEST_BROKER"
ENGINES = ("embedded", "tansu")

_chosen = os.environ.get(BROKER_ENV, "embedded")
if _chosen not in ENGINES:
    raise pytest.UsageError(f"{BROKER_ENV}: expected one of {', '.join(ENGINES)}, got {_chosen!r}")

ON_TANSU = _chosen == "tansu"
EXTERNAL = not ON_TANSU and bool(os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
ENGINE = "tansu" if ON_TANSU else "external" if EXTERNAL else "embedded"

# Group timing for streams that restart or join fresh groups.
# - The embedded cluster does not act on LeaveGroup for classic groups: a restarted stream rejoins only when
#   the old member's session expires; it has no minimum session, so 3 s with a heartbeat every second.
# - A real cluster's minimum session timeout is 6 s (group.min.session.timeout.ms).
# - Tansu honours LeaveGroup and has no minimum, but a group's first join waits about half the session
#   timeout: 2 s sessions make that wait 1 s.
FAST_REJOIN = {
    "embedded": {"session.timeout.ms": 3000, "heartbeat.interval.ms": 1000},
    "external": {"session.timeout.ms": 6000},
    "tansu": {"session.timeout.ms": 2000, "heartbeat.interval.ms": 500},
}[ENGINE]

# Producer settings the tests' own producers add on this broker. Tansu answers the high watermark after a
# multi-record batch as the last batch's base offset + 1 (ListOffsets LATEST after one Produce of a 10-record
# batch at offset 0 answers 1; Kafka's protocol says the offset after the last record, 10), so on Tansu every
# record goes in a batch of its own and the watermarks the tests check are right.
PRODUCER_CONFIG = {"batch.num.messages": 1} if ON_TANSU else {}


def tansu_limitation(reason: str) -> pytest.MarkDecorator:
    """Skip on Tansu only, naming what Tansu does differently from Kafka's protocol and the evidence."""
    return pytest.mark.skipif(ON_TANSU, reason=f"Tansu limitation: {reason}")


# KIP-848 (group.protocol=consumer): Tansu's ApiVersions answer (v0) lists no ConsumerGroupHeartbeat (API key
# 68), the new protocol's only request to join, heartbeat and be assigned; a member with group.protocol=consumer
# is never assigned a partition there (librdkafka waits for a coordinator that supports it).
NO_KIP848 = tansu_limitation("no KIP-848: ApiVersions lists no ConsumerGroupHeartbeat (API key 68), so a "
                             "group.protocol=consumer member is never assigned a partition")

# ListOffsets with a timestamp: records at offsets 0..49 stamped base + i s; asked for base + 20 s, Tansu answers
# offset 0, and 0 again for a timestamp after every record. Kafka's protocol answers the earliest offset whose
# timestamp is >= the one asked (20), and -1 when there is none (the caller goes to the end).
LIST_OFFSETS_BY_TIME = tansu_limitation("ListOffsets by timestamp answers offset 0 whatever the timestamp (T = "
                                        "record 20's answers 0, T after every record answers 0); Kafka answers "
                                        "the first offset with timestamp >= T, or -1 when none is")

# The log start never moves in Tansu's memory storage: it has no retention, and DeleteRecords (API key 21, to
# offset 5 of a 10-record partition) panics the broker's handler ("panicked at tansu-storage/src/dynostore.rs:
# 641:9: not yet implemented") and drops the connection; Kafka answers low watermark 5.
NO_LOG_START_MOVE = tansu_limitation("the log start never moves: memory storage has no retention, and "
                                     "DeleteRecords panics ('not yet implemented', dynostore.rs:641) instead of "
                                     "answering the new low watermark")

# A group's first join: Kafka's coordinator waits group.initial.rebalance.delay.ms (3 s by default) for more
# members; Tansu waits about half the joining member's session timeout, 23 s at librdkafka's default 45 s (1 s at
# 2 s). Streams that tests start with the default session get a short one on Tansu, so the first assignment
# comes as soon as on Kafka; elsewhere they keep the default.
QUICK_FIRST_JOIN = dict(FAST_REJOIN) if ON_TANSU else {}

# A group whose leaving member the broker acts on at once: the embedded cluster ignores a classic member's
# LeaveGroup but acts on a KIP-848 member's leave; Tansu has no KIP-848 (see NO_KIP848) and honours the classic
# LeaveGroup, so there the classic protocol (with short sessions) is the one that shows a member leaving.
LEAVES_AT_ONCE = dict(FAST_REJOIN) if ON_TANSU else {"group.protocol": "consumer"}

# Transactions: a read_committed consumer (librdkafka's default isolation.level) reading a partition with
# aborted transactions (flushed, then abort_transaction) is handed the aborted records on Tansu; Kafka's Fetch
# answer to isolation_level=1 names the aborted transactions (aborted_transactions) so the consumer drops them.
READ_COMMITTED_SHOWS_ABORTED = ("read_committed is incomplete: a read_committed Fetch hands the consumer the "
                                "records of aborted transactions; Kafka's Fetch names them in "
                                "aborted_transactions so the consumer drops them")


# A group all of whose members leave (two consumers of a 4-partition topic closed, at once or one after the
# other), then a new member joins: in about half the trials Tansu answers its JoinGroup with generation 2 and a
# departed member as leader, and every SyncGroup after with REBALANCE_IN_PROGRESS, rejoin after rejoin (librdkafka
# debug=cgrp: "JoinGroup response: GenerationId 2, LeaderId <a closed member>"; seen 20 s and 120 s long, with
# 2 s sessions). Kafka's coordinator removes a member on its LeaveGroup, or when its session expires, and elects a
# leader among the members that joined. A stream restarted from two tasks (an alter, a stop and start) meets it.
DEPARTED_LEADER_KEPT = ("a group all of whose members left keeps a departed member as its leader: the next member's "
                        "JoinGroup answers generation 2 led by a closed member, and its SyncGroup answers "
                        "REBALANCE_IN_PROGRESS on every rejoin (about half the trials, plain confluent-kafka "
                        "consumers); Kafka removes a member on LeaveGroup or when its session expires")


def skip_rest_on_tansu(reason: str) -> None:
    """What follows in this test meets a Tansu limitation: skip it there (the checks before it ran and passed)."""
    if ON_TANSU:
        pytest.skip(f"Tansu limitation: {reason}")

# Race tests need a group's first assignment to come a while after the join (3 s: Kafka's and the embedded
# cluster's initial rebalance delay). On Tansu that wait is half the session timeout: a 6 s session there.
SLOW_FIRST_JOIN = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000} if ON_TANSU else {}

# SASL on a listener without authentication: asked SaslHandshake for PLAIN, Tansu (started without
# --authentication) answers UNSUPPORTED_SASL_MECHANISM while listing PLAIN as its enabled mechanism; librdkafka
# then reports the broker down (_TRANSPORT, all brokers down), not an authentication failure (_AUTHENTICATION),
# which is what a test of the stream's status for a failed login needs.
SASL_HANDSHAKE = ("SaslHandshake(PLAIN) answers UNSUPPORTED_SASL_MECHANISM while listing PLAIN as enabled, so "
                  "the client reports all brokers down, not an authentication failure")
