"""`engine: spark` through a real host (`mgstreams serve` child): a stream created by the API runs as a Structured
Streaming query on a local session the host starts, set_offset through the API is applied between micro-batches,
and describe shows the query. Bad engine values are refused with a 400 naming the field and the value (and by
`mgstreams create --engine spark`). docs/how-to/spark-engine.md describes this."""
from __future__ import annotations

import uuid

import httpx
import pytest
from cli_helpers import invoke
from stream_helpers import by_partition, delivered_from_file, wait_until

from mgstreams.query_module import STREAMS_MODULE, QueryModule
from stream_registry.errors import StreamError

pytestmark = pytest.mark.spark


@pytest.mark.timeout(900)
def test_a_spark_stream_created_by_the_api_delivers_moves_and_shows_its_query(host, kafka, tmp_path):
    api = httpx.Client(base_url=host.wait_ready(), timeout=300)
    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 10, partitions=1)
    out = tmp_path / "spark.cypherl"
    body = {"name": "sp", "topics": [topic], "bootstrap_servers": kafka.bootstrap_servers,
            "transform": "stream_helpers.offsets_transform", "sink": f"cypherl://{out}",
            "consumer_group": f"g_{uuid.uuid4().hex[:10]}", "batch_size": 4}

    for bad, field, value in (({"engine": "flink"}, "engine", "flink"),
                              ({"engine": "spark", "spark.remote": "sc://elsewhere.example:15002"}, "spark.remote",
                               "elsewhere.example"),
                              ({"engine": "spark", "spark.master": "yarn"}, "spark.master", "yarn"),
                              ({"spark.master": "local[2]"}, "spark.master", "local[2]")):
        refused = api.post("/streams", json={**body, **bad})
        assert refused.status_code == 400 and field in refused.text and value in refused.text, refused.text
        assert api.get("/streams/sp").status_code == 404

    cli = invoke("create", "sp", "--topic", topic, "--bootstrap", kafka.bootstrap_servers, "--sink", f"cypherl://{out}",
                 "--engine", "spark", "--config", "spark.master=yarn", host=host)   # the CLI's way, refused alike
    assert cli.exit_code != 0 and "spark.master" in cli.output and "yarn" in cli.output, cli.output
    assert api.get("/streams/sp").status_code == 404
    with QueryModule(STREAMS_MODULE, host.url, token=host.token) as streams:   # CALL streams.create(..., options)
        with pytest.raises(StreamError, match=r"spark.remote: host 'elsewhere.example' is not one the operator"):
            streams.call("create", "sp", [topic], kafka.bootstrap_servers, body["transform"], body["sink"], "", 4,
                         100, {}, {}, "on-failure", {"engine": "spark", "spark.remote": "sc://elsewhere.example:1"})
    assert api.get("/streams/sp").status_code == 404

    created = api.post("/streams", json={**body, "engine": "spark", "spark.master": "local[2]"})
    assert created.status_code == 201, created.text
    assert created.json()["engine"] == "spark"
    altered = api.patch("/streams/sp", json={"engine": "host"})
    assert altered.status_code == 400 and "engine" in altered.text and "checkpoint" in altered.text, altered.text
    assert api.put("/streams/sp/start").status_code == 200
    wait_until(lambda: len(delivered_from_file(out)) == 10, 300, 0.5, "the first 10 records",
               lambda: api.get("/streams/sp").json())

    [change] = api.patch("/streams/sp/offsets", json={"offset": 3, "timeout_ms": 240_000}).json()
    assert (change["status"], change["offset"], change["partition"]) == ("applied", 3, 0), change
    wait_until(lambda: len(delivered_from_file(out)) == 17, 300, 0.5, "3..9 again",
               lambda: api.get("/streams/sp").json())
    assert by_partition(delivered_from_file(out))[(topic, 0)] == [*range(10), *range(3, 10)]

    info = api.get("/streams/sp").json()
    assert info["status"] == "running" and info["error"] is None, info
    spark = info["spark"]
    assert spark["master"] == "local[2]" and spark["query_id"] and spark["last_batch_id"] is not None, spark
    assert {"input_rows_per_second", "processed_rows_per_second", "batch_duration_ms"} <= spark.keys(), spark
    history = api.get("/streams/sp/history").json()
    assert history[-1]["status"] == "applied" and history[-1]["offset"] == 3, history
    assert api.put("/streams/sp/stop").status_code == 200
