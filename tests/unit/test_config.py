"""StreamConfig validation names the field and the value; secrets stay masked."""
from functools import partial

import pytest
from configs import MERGE, stream_config

from stream_registry.config import StreamConfig
from stream_registry.errors import ConfigError

_config = partial(stream_config, transform=MERGE)


@pytest.mark.parametrize("field, value", [
    ("name", "1abc"), ("name", "a-b"), ("name", "x" * 129), ("name", ""),
    ("topics", []), ("topics", ["bad topic"]), ("topics", ["a", "a"]), ("topics", ["x" * 250]),
    ("bootstrap_servers", ""), ("bootstrap_servers", "nohostport"),
    ("batch_size", 0), ("batch_size", -5), ("batch_interval_ms", 0), ("batch_size", True),
    ("transform", "nodots"), ("consumer_group", " "),
])
def test_rejects_bad_fields_by_name(field, value):
    with pytest.raises(ConfigError) as info:
        _config(**{field: value}).validate()
    assert str(info.value).startswith(field)


@pytest.mark.parametrize("key", ["group.id", "bootstrap.servers", "enable.auto.commit", "rebalance_cb", "error_cb"])
def test_rejects_configs_the_plugin_owns(key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        _config(configs={key: "x"}).validate()


def test_assignment_strategy_and_group_protocol_pass_through_or_are_rejected():
    for strategy in ("range", "roundrobin", "cooperative-sticky"):
        _config(configs={"partition.assignment.strategy": strategy}).validate()
    _config(configs={"group.protocol": "consumer"}).validate()
    with pytest.raises(ConfigError, match="partition.assignment.strategy"):
        _config(configs={"partition.assignment.strategy": "sticky-ish"}).validate()


def test_default_group_is_per_stream_and_secrets_are_masked():
    config = _config(credentials={"sasl.password": "hunter2-secret"}, configs={"sasl.username": "bob"})
    assert config.group_id == "mgstreams_orders"
    assert _config(name="payments").group_id == "mgstreams_payments"
    assert "hunter2-secret" not in repr(config) and "hunter2-secret" not in str(config)
    assert config.client_config()["sasl.password"] == "hunter2-secret"
    with pytest.raises(ConfigError) as info:
        _config(configs={"group.id": "x", "sasl.password": "hunter2-secret"}).validate()
    assert "hunter2-secret" not in str(info.value)


def test_a_secret_that_is_part_of_a_field_name_leaves_the_field_named():
    """Found by test_fuzz: an OAUTHBEARER config of `consumer` turned the error into `****_group: …`."""
    config = StreamConfig(name="s", topics=["t"], bootstrap_servers="localhost:9092", transform="m.f",
                          sink="null://", consumer_group="", configs={"sasl.oauthbearer.config": "consumer"})
    with pytest.raises(ConfigError) as exc:
        config.validate()
    assert str(exc.value) == "consumer_group: '' is not a valid group id"
    assert "consumer_group=''" in repr(config) and "'sasl.oauthbearer.config': '****'" in repr(config)
    with pytest.raises(ConfigError, match=r"^configs\['group.id'\]: set by mgstreams itself") as refused:
        StreamConfig(name="s", topics=["t"], bootstrap_servers="h:1", transform="m.f", sink="null://",
                     configs={"group.id": "consumer", "sasl.oauthbearer.config": "consumer"}).validate()
    assert "consumer" not in str(refused.value).partition(": ")[2]


def test_alter_rotates_credentials_by_merge_and_logs_their_names_not_their_values():
    """Issue 46: credentials could not be altered ("drop and create"): a rotated SASL password lost the stream's
    history. Now `credentials` merges as `configs` does (a null removes a key) and the log names what changed."""
    from stream_registry.registry.host.admission import shown_change

    before = StreamConfig("s", ["t"], "127.0.0.1:9092", MERGE, "null://",
                          credentials={"sasl.username": "app", "sasl.password": "old-pw"})
    after = before.altered({"credentials": {"sasl.password": "new-pw"}})
    assert after.credentials == {"sasl.username": "app", "sasl.password": "new-pw"}
    assert before.credentials["sasl.password"] == "old-pw"   # a value: the original is untouched
    line = shown_change(after, "credentials", before.credentials, after.credentials)
    assert line == "{sasl.password: changed}" and "pw" not in line
    assert before.altered({"bootstrap_servers": "127.0.0.1:9093"}).bootstrap_servers == "127.0.0.1:9093"
    with pytest.raises(ConfigError, match="^credentials: expected a map"):
        before.altered({"credentials": "secret"})


@pytest.mark.parametrize("value", [-1, 60_001, 0.5, True, "500"])
def test_commit_interval_is_named_in_its_error(value):
    with pytest.raises(ConfigError, match=r"^commit\.interval\.ms \(commit_interval_ms\): must be an integer"):
        _config(commit_interval_ms=value).validate()


def test_commit_interval_defaults_to_half_a_second_and_is_alterable():
    from stream_registry.config import alter_fields

    assert _config().commit_interval_ms == 500   # a backlog's batches committed every 0.5 s (the delivery docs)
    assert alter_fields({"commit.interval.ms": 500}) == {"commit_interval_ms": 500}
