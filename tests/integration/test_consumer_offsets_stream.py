"""The consumer_offsets transformation end to end: a stream on a topic holding `__consumer_offsets` records
(tests/support/consumer_offsets_records.py) writes them through a cypherl sink and outlives malformed ones."""
from __future__ import annotations

from consumer_offsets_records import T, group_metadata_key, key, value
from stream_helpers import FAST_REJOIN, wait_until

from stream_registry import StreamConfig, StreamRegistry, StreamStatus


# -- end to end: a stream ingesting such records ------------------------------------------------------------
def test_a_stream_writes_commits_and_outlives_malformed_records(kafka, tmp_path):
    from confluent_kafka import Producer

    if kafka.embedded is not None:
        kafka.embedded.set_initial_rebalance_delay(200)
    topic = kafka.new_topic(partitions=1, prefix="consumer_offsets_copy")
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    for k, v in [(key("billing", "orders", 0), value(10, T)), (b"\x00", b"junk"),
                 (group_metadata_key("billing"), b"\x00\x03x"), (key("billing", "orders", 0), value(11, T + 5))]:
        producer.produce(topic, key=k, value=v, partition=0)
    producer.produce(topic, key=key("billing", "orders", 0), value=None, partition=0)   # a real null value
    assert producer.flush(10) == 0
    out = tmp_path / "state" / "output" / "offsets.cypherl"
    registry = StreamRegistry(tmp_path / "state")
    try:
        registry.create(StreamConfig(name="offsets", topics=[topic], bootstrap_servers=kafka.bootstrap_servers,
                                     transform="stream_registry.builtin_transformations.consumer_offsets",
                                     sink=f"cypherl://{out}", consumer_group="offsets_e2e", configs=FAST_REJOIN,
                                     batch_interval_ms=20))
        registry.start("offsets")
        wait_until(lambda: any(r.committed_offset == 5 for r in registry.describe("offsets")), timeout=30,
                   what="all five records committed")
        assert registry.get("offsets").status == StreamStatus.RUNNING
    finally:
        registry.close()
        if kafka.embedded is not None:
            kafka.embedded.set_initial_rebalance_delay(3000)
    lines = [line for line in out.read_text().splitlines() if line.strip() and not line.startswith("//")]
    assert len(lines) == 3, lines
    assert lines[0].startswith('MERGE (g:ConsumerGroup {name: "billing"})') and "c.offset = 10" in lines[0]
    assert "localDateTime(\"2023-11-14T22:13:20\")" in lines[0] and "source_offset: 0" in lines[0]
    assert "c.offset = 11" in lines[1] and "source_offset: 3" in lines[1]
    assert lines[2].startswith('MATCH (:ConsumerGroup {name: "billing"})-[a:AT]->') and lines[2].endswith("DELETE a;")
