"""`engine` on a stream config (stream_registry/stream_engine.py): host or spark, a Spark stream's place (a local
master or a Spark Connect URL under the host allowlist), each bad value refused naming the field and the value."""
from __future__ import annotations

import pytest

from stream_registry.config import StreamConfig
from stream_registry.errors import ConfigError
from stream_registry.stream_engine import check_remote


def config(**fields) -> StreamConfig:
    return StreamConfig("orders", ["orders"], "localhost:9092", "stream_helpers.offsets_transform", "null://", **fields)


def test_host_is_the_default_and_spark_takes_a_local_master_or_an_allowed_connect_server():
    assert config().engine == "host"
    for fields in ({"engine": "spark"}, {"engine": "spark", "spark_master": "local[2]"},
                   {"engine": "spark", "spark_master": "local[*]"},
                   {"engine": "spark", "spark_remote": "sc://localhost:15002"}):
        config(**fields).validate()


@pytest.mark.parametrize("fields, message", [
    ({"engine": "flink"}, r"^engine: expected one of 'host', 'spark', got 'flink'$"),
    ({"engine": "spark", "spark_master": "yarn"}, r"^spark.master: .*got 'yarn'$"),
    ({"engine": "spark", "spark_master": "spark://10.0.0.1:7077"}, r"^spark.master: .*got 'spark://10.0.0.1:7077'"),
    ({"spark_master": "local[2]"}, r"^spark.master: 'local\[2\]' is only for a stream with engine 'spark'"),
    ({"spark_remote": "sc://localhost:15002"}, r"^spark.remote: .* is only for a stream with engine 'spark'"),
    ({"engine": "spark", "spark_remote": "sc://evil.example:15002"},
     r"^spark.remote: host 'evil.example' is not one the operator allows"),
    ({"engine": "spark", "spark_remote": "sc://localhost:15002/;token=abc"}, r"^spark.remote: expected sc://host:port"),
    ({"engine": "spark", "spark_remote": "sc://user@localhost:15002"}, r"^spark.remote: expected sc://host:port"),
    ({"engine": "spark", "spark_remote": "http://localhost:15002"}, r"^spark.remote: expected sc://host:port"),
    ({"engine": "spark", "spark_remote": "sc://localhost:15002", "spark_master": "local"},
     r"^spark.remote: give spark.remote .* or spark.master .*, not both"),
    ({"engine": "spark", "tasks": 2}, r"^tasks: a stream with engine 'spark' runs as one query .* got 2$"),
])
def test_a_bad_engine_value_is_refused_naming_the_field_and_the_value(fields, message):
    with pytest.raises(ConfigError, match=message):
        config(**fields).validate()


def test_a_token_in_the_url_is_not_echoed():
    with pytest.raises(ConfigError) as refused:
        check_remote("sc://localhost:15002/;token=s3cret")
    assert "s3cret" not in str(refused.value)


def test_the_url_used_is_the_one_parsed_and_the_engine_cannot_be_altered():
    assert check_remote("sc://LOCALHOST:15002") == "sc://localhost:15002"
    with pytest.raises(ConfigError, match=r"^engine: cannot be altered \(a Spark stream's query keeps its own "
                                          r"checkpoint\)"):
        config().altered({"engine": "spark"})


def test_without_pyspark_the_host_refuses_a_spark_stream_at_create_naming_why(tmp_path, monkeypatch):
    import importlib.util

    from mgstreams.host import spark_streams
    from stream_registry import StreamRegistry

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyspark" else real(name, *a))
    engines, unavailable = spark_streams.spark_engines(tmp_path)
    assert engines == {} and unavailable == {"spark": spark_streams.NO_PYSPARK}
    registry = StreamRegistry(tmp_path / "state", engines=engines, unavailable_engines=unavailable)
    try:
        with pytest.raises(ConfigError, match=r"^engine: 'spark' cannot run on this host \(pyspark is not installed"):
            registry.create(config(engine="spark"))
        assert registry.list() == []
    finally:
        registry.close()
